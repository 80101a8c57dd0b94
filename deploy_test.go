package exactlyonce_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/exactlyonce/exactlyonce/audit"
)

// exportedNames returns the Prometheus names of every instrument the SDK
// registers, as the OpenTelemetry Prometheus exporter the example binaries
// use on /metrics writes them (a unit suffix, _total on counters), plus
// the verifier's metrics (audit.WriteMetrics).
func exportedNames(t *testing.T) []string {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	require.NoError(t, err)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer mp.Shutdown(context.Background())
	m := mp.Meter("deploy_test")
	ctx := context.Background()
	for _, in := range registered(t) {
		switch in.Kind {
		case "counter":
			c, err := m.Int64Counter(in.Name, metric.WithUnit(in.Unit))
			require.NoError(t, err)
			c.Add(ctx, 1)
		case "updowncounter":
			c, err := m.Int64UpDownCounter(in.Name, metric.WithUnit(in.Unit))
			require.NoError(t, err)
			c.Add(ctx, 1)
		case "histogram":
			c, err := m.Float64Histogram(in.Name, metric.WithUnit(in.Unit))
			require.NoError(t, err)
			c.Record(ctx, 1)
		case "gauge":
			c, err := m.Float64Gauge(in.Name, metric.WithUnit(in.Unit))
			require.NoError(t, err)
			c.Record(ctx, 1)
		default:
			t.Fatalf("%s: instrument kind %q unknown to this test", in.Name, in.Kind)
		}
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	names := []string{audit.MetricBuckets, audit.MetricLastRun}
	for _, f := range mfs {
		names = append(names, f.GetName())
	}
	return names
}

var metricRE = regexp.MustCompile(`\bexactlyonce_[a-z0-9_]+`)

// metricsOf returns the exactlyonce metrics a PromQL expression names,
// a histogram's series (_bucket, _sum, _count) by the histogram's name.
func metricsOf(expr string, known []string) []string {
	var out []string
	for _, m := range metricRE.FindAllString(expr, -1) {
		if !slices.Contains(known, m) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(m, suffix); ok && slices.Contains(known, base) {
					m = base
				}
			}
		}
		out = append(out, m)
	}
	return out
}

// TestDashboardMetrics loads the Grafana dashboard and checks that every
// panel's every query names only metrics the SDK registers (or the
// verifier writes): a metric renamed in the code, or mistyped in the
// dashboard, fails here.
func TestDashboardMetrics(t *testing.T) {
	known := exportedNames(t)
	b, err := os.ReadFile(filepath.Join("deploy", "grafana", "exactlyonce.json"))
	require.NoError(t, err)
	var dash struct {
		Title  string
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	queries := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			names := metricsOf(tg.Expr, known)
			assert.NotEmpty(t, names, "panel %q: query %q names no exactlyonce metric", p.Title, tg.Expr)
			for _, n := range names {
				assert.Contains(t, known, n, "panel %q: query %q", p.Title, tg.Expr)
			}
			queries++
		}
	}
	assert.Greater(t, queries, 20)
	for _, signal := range []string{"exactlyonce_checkpoint_consumer_lag", "exactlyonce_checkpoint_last_completed_age_seconds"} {
		assert.Contains(t, string(b), signal, "the seed's primary health signals are on the dashboard")
	}
}

// promtool returns the path of promtool (Debian's prometheus package,
// which make deps installs); without it the test fails under CI=true and
// is skipped otherwise.
func promtool(t *testing.T) string {
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not found (make deps installs Debian's prometheus package): %v", err)
		}
		t.Skipf("promtool not found (make deps installs it): %v", err)
	}
	return p
}

// TestAlertRules checks the alert rules with promtool and runs their unit
// tests over recorded series (deploy/prometheus/alerts_test.yml), checks
// every rule names registered metrics, and that every alert has a runbook
// section.
func TestAlertRules(t *testing.T) {
	known := exportedNames(t)
	rules, err := os.ReadFile(filepath.Join("deploy", "prometheus", "alerts.yml"))
	require.NoError(t, err)
	runbook, err := os.ReadFile(filepath.Join("docs", "runbook.md"))
	require.NoError(t, err)
	alertRE := regexp.MustCompile(`(?m)^\s+- alert: (\S+)\n\s+expr: ((?:.|\n)*?)\n\s+(?:for|labels):`)
	alerts := alertRE.FindAllStringSubmatch(string(rules), -1)
	require.Len(t, alerts, strings.Count(string(rules), "- alert:"))
	for _, a := range alerts {
		for _, n := range metricsOf(a[2], known) {
			assert.Contains(t, known, n, "alert %s", a[1])
		}
		assert.Contains(t, string(runbook), "\n## "+a[1]+"\n", "docs/runbook.md has a section for %s", a[1])
		assert.Contains(t, string(rules), "docs/runbook.md#"+strings.ToLower(a[1]), "alert %s links its runbook", a[1])
	}

	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = filepath.Join("deploy", "prometheus")
		out, err := cmd.CombinedOutput()
		assert.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}
