package demo

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"time"

	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
)

// Delivery is one webhook the simulated providers send, and what the
// pipeline must make of it.
type Delivery struct {
	Provider  string // "github" or "jira"
	ID        string // X-GitHub-Delivery / X-Atlassian-Webhook-Identifier
	EventType string // X-GitHub-Event / Jira's webhookEvent
	Body      []byte
	Form      bool // GitHub form content type: payload=<url-encoded JSON>
	// Want is the normalized event the pipeline must count, built here
	// independently of the normalizer; nil for a delivery the gateway
	// answers 2xx without publishing (ping, an activity the metrics do not
	// count) or rejects.
	Want *devmetrics.Event
	// Reject marks a payload that cannot be normalized: the gateway must
	// answer 4xx and publish nothing.
	Reject bool
}

// eventStart is the event time of the first generated event. Fixed, so two
// runs with one seed produce the same deliveries.
var eventStart = time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)

// templates are GitHub's example payloads the generator varies, decoded
// once. They are shared by every delivery built from them and never
// modified: mutate copies each map it changes on the way (copy on write).
type templates struct {
	merged, review, comment, deployment, opened, ping map[string]any
}

func PickTemplates(ex map[string][]githubExample) (templates, error) {
	var t templates
	find := func(event string, ok func(map[string]any) bool) (map[string]any, error) {
		for _, e := range ex[event] {
			var p map[string]any
			if json.Unmarshal(e.Body, &p) == nil && ok(p) {
				return p, nil
			}
		}
		return nil, fmt.Errorf("GitHub examples: no %s example to build from", event)
	}
	action := func(a string) func(map[string]any) bool {
		return func(p map[string]any) bool { return p["action"] == a }
	}
	var err error
	if t.merged, err = find("pull_request", action("closed")); err != nil {
		return t, err
	}
	if t.review, err = find("pull_request_review", action("submitted")); err != nil {
		return t, err
	}
	if t.comment, err = find("pull_request_review_comment", action("created")); err != nil {
		return t, err
	}
	if t.deployment, err = find("deployment_status", func(p map[string]any) bool {
		ds, _ := p["deployment_status"].(map[string]any)
		return ds != nil && ds["state"] == "success"
	}); err != nil {
		return t, err
	}
	if t.opened, err = find("pull_request", action("opened")); err != nil {
		return t, err
	}
	t.ping, err = find("ping", func(map[string]any) bool { return true })
	return t, err
}

// Generator builds the deliveries of one run from a seed.
type Generator struct {
	rng       *rand.Rand
	tpl       templates
	orgs      int
	seq       int
	incidents [][]incident // opened incidents, by org
}

type incident struct {
	key, reporter string
	opened        time.Time
}

func ghOrgName(i int) string     { return fmt.Sprintf("acme-%02d", i) }
func jiraSiteName(i int) string  { return fmt.Sprintf("acme-%02d.atlassian.net", i) }
func ghLogin(org, k int) string  { return fmt.Sprintf("dev-%02d-%d", org, k) }
func jiraAcct(org, k int) string { return fmt.Sprintf("5b10a2844c20165700e%02d%03d", org, k) }

const employeesPerOrg = 6

// generate returns n deliveries of orgs organisations spread over span of
// event time in time order: mostly activities the metrics count, plus pings,
// activities they do not count, and a few payloads that cannot be
// normalized.
func generate(rng *rand.Rand, tpl templates, n, orgs int, span time.Duration) []Delivery {
	g := NewGenerator(rng, tpl, orgs)
	out := make([]Delivery, n)
	for i := range out {
		out[i] = g.Nth(i, n, span)
	}
	return out
}

func NewGenerator(rng *rand.Rand, tpl templates, orgs int) *Generator {
	return &Generator{rng: rng, tpl: tpl, orgs: orgs, incidents: make([][]incident, orgs)}
}

// Nth builds delivery i of n spread over span of event time; called for
// i = 0, 1, ... n-1 in order (the chaos run builds them as it goes rather
// than all at once).
func (g *Generator) Nth(i, n int, span time.Duration) Delivery {
	step := span / time.Duration(n)
	t := eventStart.Add(time.Duration(i)*step + time.Duration(g.rng.Int64N(int64(step))))
	if last := n - i; last <= 2*g.orgs {
		// Every tenant's last event (each organisation's GitHub org and
		// its Jira site, which Kafka partitions apart) is one the
		// metrics count, a second before the last hour ends. Event time
		// moves only with counted events (and, once a partition is idle,
		// with the clock from its newest one), so this closes every
		// partition's last hourly windows a second after the idle
		// timeout instead of up to an hour of wall time later. (When
		// the last event of a partition was a ping, its last hour stayed
		// open past the verdict's deadline.)
		org, t := (last-1)%g.orgs, eventStart.Add(span-time.Second)
		g.seq++
		emp := g.rng.IntN(employeesPerOrg)
		other := (emp + 1 + g.rng.IntN(employeesPerOrg-1)) % employeesPerOrg
		if last > g.orgs {
			return g.github(devmetrics.TypePRMerged, org, emp, other, t)
		}
		return g.jira(devmetrics.TypeIncidentOpened, org, emp, other, t)
	}
	return g.next(g.rng.IntN(g.orgs), t)
}

func (g *Generator) next(org int, t time.Time) Delivery {
	g.seq++
	emp := g.rng.IntN(employeesPerOrg)
	other := (emp + 1 + g.rng.IntN(employeesPerOrg-1)) % employeesPerOrg
	r := g.rng.Float64()
	switch {
	case r < 0.18:
		return g.github(devmetrics.TypePRMerged, org, emp, other, t)
	case r < 0.36:
		return g.github(devmetrics.TypeReview, org, emp, other, t)
	case r < 0.54:
		return g.github(devmetrics.TypeReviewComment, org, emp, other, t)
	case r < 0.64:
		return g.github(devmetrics.TypeDeployment, org, emp, other, t)
	case r < 0.72:
		return g.jira(devmetrics.TypeIncidentOpened, org, emp, other, t)
	case r < 0.78:
		return g.jira(devmetrics.TypeIncidentTransitioned, org, emp, other, t)
	case r < 0.90:
		return g.jira(devmetrics.TypeIssueTransitioned, org, emp, other, t)
	case r < 0.93:
		return g.github("ping", org, emp, other, t)
	case r < 0.97:
		return g.github("opened", org, emp, other, t)
	case r < 0.985:
		return g.jira("edited", org, emp, other, t)
	default:
		return g.github("malformed", org, emp, other, t)
	}
}

// mutate lets f change a copy of a template and encodes it. f changes
// nested objects only through obj, which copies them first, so the
// template itself is never modified.
func mutate(tpl map[string]any, f func(p map[string]any)) []byte {
	p := maps.Clone(tpl)
	f(p)
	b, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("template: %v", err)) // maps of JSON values always encode
	}
	return b
}

// obj returns p[key] as an object to change: a copy of the one there (p
// itself must be a copy), or a new one.
func obj(p map[string]any, key string) map[string]any {
	m, _ := p[key].(map[string]any)
	m = maps.Clone(m)
	if m == nil {
		m = map[string]any{}
	}
	p[key] = m
	return m
}

func ghTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func (g *Generator) github(kind string, org, emp, other int, t time.Time) Delivery {
	t = t.Truncate(time.Second) // GitHub's times have seconds
	orgLogin, login, otherLogin := ghOrgName(org), ghLogin(org, emp), ghLogin(org, other)
	repo := fmt.Sprintf("service-%d", g.rng.IntN(4))
	number := 1 + g.rng.IntN(5000)
	d := Delivery{
		Provider: "github",
		ID:       fmt.Sprintf("%08x-%04x-11f1-%04x-%012x", g.rng.Uint32(), g.seq&0xffff, g.rng.Uint32()&0xffff, g.rng.Uint64()&0xffffffffffff),
		Form:     g.rng.IntN(10) < 3,
	}
	common := func(p map[string]any) {
		p["organization"] = map[string]any{"login": orgLogin, "id": 9919 + org, "node_id": "O_kgDO" + orgLogin,
			"url": "https://api.github.com/orgs/" + orgLogin, "description": ""}
		rp := obj(p, "repository")
		rp["name"], rp["full_name"] = repo, orgLogin+"/"+repo
		obj(rp, "owner")["login"] = orgLogin
		obj(p, "sender")["login"] = login
	}
	pr := func(p map[string]any, author string, created time.Time) {
		m := obj(p, "pull_request")
		m["number"], m["created_at"], m["updated_at"] = number, ghTime(created), ghTime(t)
		obj(m, "user")["login"] = author
	}
	subject := orgLogin + "/" + repo + "#" + fmt.Sprint(number)
	want := &devmetrics.Event{OrgID: orgLogin, Source: "github", EventID: d.ID, EmployeeID: login, Time: t, Subject: subject}
	opened := t.Add(-time.Duration(60+g.rng.IntN(48*3600)) * time.Second)
	switch kind {
	case devmetrics.TypePRMerged:
		d.EventType, want.Type = "pull_request", devmetrics.TypePRMerged
		d.Body = mutate(g.tpl.merged, func(p map[string]any) {
			common(p)
			p["action"] = "closed"
			pr(p, login, opened)
			m := obj(p, "pull_request")
			m["merged"], m["merged_at"], m["closed_at"], m["state"] = true, ghTime(t), ghTime(t), "closed"
			m["merged_by"] = map[string]any{"login": otherLogin, "type": "User"}
		})
	case devmetrics.TypeReview:
		d.EventType, want.Type = "pull_request_review", devmetrics.TypeReview
		want.Status, want.Opened, want.LatencyS = "approved", opened, t.Sub(opened).Seconds()
		d.Body = mutate(g.tpl.review, func(p map[string]any) {
			common(p)
			pr(p, otherLogin, opened)
			rv := obj(p, "review")
			rv["submitted_at"], rv["state"] = ghTime(t), "approved"
			obj(rv, "user")["login"] = login
		})
	case devmetrics.TypeReviewComment:
		d.EventType, want.Type = "pull_request_review_comment", devmetrics.TypeReviewComment
		d.Body = mutate(g.tpl.comment, func(p map[string]any) {
			common(p)
			pr(p, otherLogin, opened)
			c := obj(p, "comment")
			c["created_at"], c["updated_at"] = ghTime(t), ghTime(t)
			obj(c, "user")["login"] = login
		})
	case devmetrics.TypeDeployment:
		id := 145988746 + g.seq
		d.EventType, want.Type, want.Subject, want.Status = "deployment_status", devmetrics.TypeDeployment, fmt.Sprint(id), "success"
		d.Body = mutate(g.tpl.deployment, func(p map[string]any) {
			common(p)
			dep := obj(p, "deployment")
			dep["id"], dep["created_at"] = id, ghTime(opened)
			obj(dep, "creator")["login"] = login
			ds := obj(p, "deployment_status")
			ds["created_at"], ds["updated_at"], ds["state"] = ghTime(t), ghTime(t), "success"
			obj(ds, "creator")["login"] = "github-actions[bot]"
		})
	case "ping":
		d.EventType, want = "ping", nil
		d.Body = mutate(g.tpl.ping, func(p map[string]any) { common(p); p["hook_id"] = 30000 + org })
	case "opened":
		d.EventType, want = "pull_request", nil
		d.Body = mutate(g.tpl.opened, func(p map[string]any) { common(p); pr(p, login, t) })
	default: // malformed: a review GitHub would never send, without submitted_at
		d.EventType, want, d.Reject = "pull_request_review", nil, true
		d.Body = mutate(g.tpl.review, func(p map[string]any) {
			common(p)
			pr(p, otherLogin, opened)
			delete(obj(p, "review"), "submitted_at")
		})
	}
	d.Want = want
	return d
}

const jiraTime = "2006-01-02T15:04:05.000-0700"

// jiraIssuePayload is a Jira Cloud issue webhook shaped as Atlassian
// documents it (timestamp, webhookEvent, issue_event_type_name, user, issue
// with fields, changelog).
func jiraIssuePayload(site, event, key, issueType, status, reporter, actor string, created, at time.Time, from, to string) map[string]any {
	base := "https://" + site + "/rest/api/2/"
	p := map[string]any{
		"timestamp":             at.UnixMilli(),
		"webhookEvent":          event,
		"issue_event_type_name": map[bool]string{true: "issue_created", false: "issue_generic"}[event == "jira:issue_created"],
		"user": map[string]any{"self": base + "user?accountId=" + actor, "accountId": actor, "accountType": "atlassian",
			"displayName": "User " + actor[len(actor)-5:], "active": true, "timeZone": "Europe/Berlin"},
		"issue": map[string]any{
			"id": fmt.Sprint(10000 + len(key)), "self": base + "issue/" + key, "key": key,
			"fields": map[string]any{
				"summary":   "Checkout returns 500 for " + key,
				"created":   created.Format(jiraTime),
				"updated":   at.Format(jiraTime),
				"issuetype": map[string]any{"self": base + "issuetype/10004", "id": "10004", "name": issueType, "subtask": false},
				"project":   map[string]any{"self": base + "project/10000", "id": "10000", "key": key[:3], "name": "Operations"},
				"reporter":  map[string]any{"self": base + "user?accountId=" + reporter, "accountId": reporter},
				"status":    map[string]any{"name": status, "id": "10000"},
				"priority":  map[string]any{"name": "High", "id": "2"},
			},
		},
	}
	if to != "" {
		p["changelog"] = map[string]any{"id": "1" + key[4:], "items": []any{map[string]any{
			"field": "status", "fieldtype": "jira", "fieldId": "status", "from": "10000", "fromString": from, "to": "10001", "toString": to,
		}}}
	} else if event == "jira:issue_updated" {
		p["changelog"] = map[string]any{"id": "2" + key[4:], "items": []any{map[string]any{
			"field": "summary", "fieldtype": "jira", "fieldId": "summary", "fromString": "Checkout 500", "toString": "Checkout returns 500",
		}}}
	}
	return p
}

func (g *Generator) jira(kind string, org, emp, other int, t time.Time) Delivery {
	site, acct, otherAcct := jiraSiteName(org), jiraAcct(org, emp), jiraAcct(org, other)
	d := Delivery{Provider: "jira", ID: fmt.Sprintf("%d", 900000000+g.seq*7+g.rng.IntN(7))}
	want := &devmetrics.Event{OrgID: site, Source: "jira", EventID: d.ID, Time: t.Truncate(time.Millisecond)}
	t = want.Time
	var p map[string]any
	if kind == devmetrics.TypeIncidentTransitioned && len(g.incidents[org]) == 0 {
		kind = devmetrics.TypeIssueTransitioned // nothing to transition yet
	}
	switch kind {
	case devmetrics.TypeIncidentOpened:
		key := fmt.Sprintf("OPS-%d", g.seq)
		g.incidents[org] = append(g.incidents[org], incident{key: key, reporter: acct, opened: t})
		d.EventType = "jira:issue_created"
		p = jiraIssuePayload(site, d.EventType, key, "Incident", "Open", acct, acct, t, t, "", "")
		want.Type, want.EmployeeID, want.Subject, want.Status, want.Opened = devmetrics.TypeIncidentOpened, acct, key, "Open", t
	case devmetrics.TypeIncidentTransitioned:
		inc := g.incidents[org][g.rng.IntN(len(g.incidents[org]))]
		if !t.After(inc.opened) {
			t = inc.opened.Add(time.Millisecond)
			want.Time = t
		}
		to := []string{"Investigating", "Mitigated", "Resolved"}[g.rng.IntN(3)]
		d.EventType = "jira:issue_updated"
		p = jiraIssuePayload(site, d.EventType, inc.key, "Incident", to, inc.reporter, otherAcct, inc.opened, t, "Open", to)
		want.Type, want.EmployeeID, want.Subject, want.Status, want.Opened = devmetrics.TypeIncidentTransitioned, inc.reporter, inc.key, to, inc.opened
	case devmetrics.TypeIssueTransitioned:
		key := fmt.Sprintf("ENG-%d", g.seq)
		d.EventType = "jira:issue_updated"
		p = jiraIssuePayload(site, d.EventType, key, "Story", "In Progress", otherAcct, acct, t.Add(-time.Hour), t, "To Do", "In Progress")
		want.Type, want.EmployeeID, want.Subject, want.Status = devmetrics.TypeIssueTransitioned, acct, key, "In Progress"
	default: // an edit without status transition: not counted
		key := fmt.Sprintf("ENG-%d", g.seq)
		d.EventType = "jira:issue_updated"
		p = jiraIssuePayload(site, d.EventType, key, "Story", "To Do", otherAcct, acct, t.Add(-time.Hour), t, "", "")
		want = nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	d.Body, d.Want = b, want
	return d
}

// EventSpan is the event time the generated deliveries cover: several
// hourly windows per employee.
const EventSpan = 4 * time.Hour
