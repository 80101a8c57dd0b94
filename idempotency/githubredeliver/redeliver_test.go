package githubredeliver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/idempotency/githubredeliver"
)

const token = "ghp_test"

// fakeGitHub answers the REST endpoints of a hook's deliveries with the
// request and response shapes of GitHub's documentation: GET
// .../deliveries?per_page=&cursor= returns a JSON array of deliveries, newest
// first, with a Link header whose rel="next" carries the next cursor; POST
// .../deliveries/{id}/attempts answers 202 Accepted with {} and, like
// GitHub, makes a new delivery of the same GUID with redelivery true.
type fakeGitHub struct {
	t    *testing.T
	hook string // e.g. /repos/o/r/hooks/1
	now  func() time.Time

	mu         sync.Mutex
	deliveries []delivery // ascending id
	nextID     int64
	posts      []int64
	// gatewayStatus is the status a redelivery gets; 0: none is made
	// (GitHub has not got to it yet).
	gatewayStatus int
	// deliver, when set, makes each redelivery for real (to a gateway)
	// and returns its status, instead of gatewayStatus.
	deliver func(guid string) int
	// exhaustNext makes the next successful answer say that no request
	// is left until an hour from now.
	exhaustNext bool
	// limit, when set, answers the next request instead.
	limit func(w http.ResponseWriter) bool
	gets  int
	// gone are delivery ids whose redelivery GitHub answers 404.
	gone map[int64]bool
}

type delivery struct {
	ID             int64     `json:"id"`
	GUID           string    `json:"guid"`
	DeliveredAt    time.Time `json:"delivered_at"`
	Redelivery     bool      `json:"redelivery"`
	Duration       float64   `json:"duration"`
	Status         string    `json:"status"`
	StatusCode     int       `json:"status_code"`
	Event          string    `json:"event"`
	Action         *string   `json:"action"`
	InstallationID *int64    `json:"installation_id"`
	RepositoryID   *int64    `json:"repository_id"`
}

func newFake(t *testing.T, hook string, now func() time.Time) (*fakeGitHub, *httptest.Server) {
	f := &fakeGitHub{t: t, hook: hook, now: now, nextID: 1000}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

// add records a delivery of guid made at, answered code.
func (f *fakeGitHub) add(guid string, at time.Time, code int, redelivery bool) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	status := "OK"
	if code/100 != 2 {
		status = "Invalid HTTP Response: " + strconv.Itoa(code)
	}
	action := "opened"
	f.deliveries = append(f.deliveries, delivery{
		ID: f.nextID, GUID: guid, DeliveredAt: at.UTC().Truncate(time.Second), Redelivery: redelivery,
		Duration: 0.27, Status: status, StatusCode: code, Event: "pull_request", Action: &action,
	})
	return f.nextID
}

func (f *fakeGitHub) Posts() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.posts)
}

func (f *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+token {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"message":"Requires authentication","documentation_url":"https://docs.github.com/rest"}`))
		return
	}
	assert.Equal(f.t, "application/vnd.github+json", r.Header.Get("Accept"))
	if f.limit != nil && f.limit(w) {
		f.limit = nil
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-RateLimit-Limit", "5000")
	w.Header().Set("X-RateLimit-Remaining", "4999")
	w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(f.now().Add(time.Hour).Unix(), 10))
	if f.exhaustNext {
		f.exhaustNext = false
		w.Header().Set("X-RateLimit-Remaining", "0")
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == f.hook+"/deliveries":
		f.gets++
		f.list(w, r)
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, f.hook+"/deliveries/") && strings.HasSuffix(r.URL.Path, "/attempts"):
		id, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, f.hook+"/deliveries/"), "/attempts"), 10, 64)
		i := slices.IndexFunc(f.deliveries, func(d delivery) bool { return d.ID == id })
		if err != nil || i < 0 || f.gone[id] {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"message":"Not Found"}`))
			return
		}
		if f.deliveries[i].DeliveredAt.Before(f.now().Add(-72 * time.Hour)) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte(`{"message":"Validation Failed"}`))
			return
		}
		f.posts = append(f.posts, id)
		status, guid := f.gatewayStatus, f.deliveries[i].GUID
		f.mu.Unlock()
		if f.deliver != nil {
			status = f.deliver(guid)
		}
		if status != 0 {
			f.add(guid, f.now(), status, true)
		}
		f.mu.Lock()
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{}`))
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"message":"Not Found"}`))
	}
}

// list serves one page, newest first, starting below the cursor (an id).
func (f *fakeGitHub) list(w http.ResponseWriter, r *http.Request) {
	perPage := 30
	if s := r.URL.Query().Get("per_page"); s != "" {
		perPage, _ = strconv.Atoi(s)
	}
	below := int64(1 << 62)
	if c := r.URL.Query().Get("cursor"); c != "" {
		n, err := strconv.ParseInt(strings.TrimPrefix(c, "v1_"), 10, 64)
		require.NoError(f.t, err)
		below = n
	}
	var page []delivery
	for i := len(f.deliveries) - 1; i >= 0 && len(page) < perPage; i-- {
		// Older deliveries are listed too: the client must stop at
		// the 3-day window by itself.
		if d := f.deliveries[i]; d.ID < below {
			page = append(page, d)
		}
	}
	if len(page) == perPage {
		last := page[len(page)-1].ID
		if slices.ContainsFunc(f.deliveries, func(d delivery) bool { return d.ID < last }) {
			next := fmt.Sprintf("http://%s%s/deliveries?per_page=%d&cursor=v1_%d", r.Host, f.hook, perPage, last)
			w.Header().Set("Link", `<`+next+`>; rel="next"`)
		}
	}
	if page == nil {
		page = []delivery{}
	}
	_ = json.NewEncoder(w).Encode(page)
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newRedeliverer(t *testing.T, srv *httptest.Server, hook githubredeliver.Hook, clk *clock, opts githubredeliver.Options) *githubredeliver.Redeliverer {
	t.Helper()
	opts.BaseURL = srv.URL
	if opts.Token == "" && opts.TokenFunc == nil {
		opts.Token = token
	}
	opts.Now = clk.Now
	if opts.PerPage == 0 {
		opts.PerPage = 2 // several pages even for a few deliveries
	}
	r, err := githubredeliver.New(hook, opts)
	require.NoError(t, err)
	return r
}

func TestPassRedeliversWhatFailedAndNeverSucceeded(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	f, srv := newFake(t, "/repos/octo-org/app/hooks/42", clk.Now)
	now := clk.Now()
	f.add("too-old", now.Add(-80*time.Hour), 503, false) // outside the 3-day window
	f.add("at-the-edge", now.Add(-72*time.Hour+time.Minute), 503, false)
	f.add("recovered", now.Add(-2*time.Hour), 503, false)
	f.add("ok", now.Add(-90*time.Minute), 202, false)
	failed := f.add("failed", now.Add(-time.Hour), 503, false)
	f.add("recovered", now.Add(-50*time.Minute), 202, true) // redelivered by hand
	f.add("rejected", now.Add(-40*time.Minute), 422, false)
	timedOut := f.add("timed-out", now.Add(-30*time.Minute), 0, false)
	f.add("failed-twice", now.Add(-20*time.Minute), 502, false)
	twice := f.add("failed-twice", now.Add(-10*time.Minute), 503, true)
	f.gatewayStatus = 202 // the gateway is back

	state := &githubredeliver.MemoryState{}
	reader := sdkmetric.NewManualReader()
	r := newRedeliverer(t, srv, githubredeliver.RepoHook("octo-org", "app", 42), clk, githubredeliver.Options{
		State: state, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	res, err := r.Pass(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 9, res.Listed, "everything inside the window, over five pages")
	assert.Equal(t, []string{"failed", "failed-twice", "timed-out"}, res.Redelivered)
	assert.Equal(t, []string{"rejected"}, res.Rejected)
	assert.Equal(t, []string{"at-the-edge"}, res.Expired)
	assert.Equal(t, []string{"recovered"}, res.Succeeded, "failed, then redelivered by hand")
	assert.ElementsMatch(t, []int64{failed, twice, timedOut}, f.Posts(), "the newest failed delivery of each GUID")

	// Next pass: the redeliveries succeeded; only they are listed.
	clk.Add(time.Minute)
	res, err = r.Pass(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 3, res.Listed, "the cursor stops the list at the last pass's newest delivery")
	assert.Equal(t, []string{"failed", "failed-twice", "timed-out"}, res.Succeeded)
	assert.Empty(t, res.Redelivered)
	snap, err := state.Load(context.Background())
	require.NoError(t, err)
	assert.Empty(t, snap.Pending)
	assert.Len(t, f.Posts(), 3)
	assert.Equal(t, map[string]int64{"redelivered": 3, "succeeded": 4, "rejected": 1, "expired": 1}, guidCounts(t, reader))
}

func guidCounts(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "exactlyonce.githubredeliver.guids" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value("outcome")
				out[v.AsString()] += dp.Value
			}
		}
	}
	return out
}

// While the gateway stays down, every redelivery fails again: each failure
// is requested again at the next pass; a request GitHub has not acted on
// yet waits for its backoff.
func TestPassWhileGatewayDown(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	f, srv := newFake(t, "/orgs/octo-org/hooks/7", clk.Now)
	f.add("g1", clk.Now().Add(-time.Minute), 503, false)
	f.gatewayStatus = 503
	r := newRedeliverer(t, srv, githubredeliver.OrgHook("octo-org", 7), clk, githubredeliver.Options{InitialBackoff: 10 * time.Minute})
	ctx := context.Background()

	for i := range 3 {
		res, err := r.Pass(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"g1"}, res.Redelivered, "pass %d: the last redelivery failed, request again", i)
		clk.Add(time.Minute)
	}
	f.mu.Lock()
	f.gatewayStatus = 0 // GitHub has not made the next redelivery yet
	f.mu.Unlock()
	res, err := r.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"g1"}, res.Redelivered)
	clk.Add(time.Minute)
	res, err = r.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"g1"}, res.Waiting, "no news since the request: wait for the backoff")
	clk.Add(4 * 10 * time.Minute) // fourth request: backoff 10m<<3 = 80m
	res, err = r.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"g1"}, res.Waiting)
	clk.Add(41 * time.Minute)
	res, err = r.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"g1"}, res.Redelivered, "backoff over: request again")
	assert.Len(t, f.Posts(), 5)
}

// A delivery GitHub answers 404 for (gone, or hidden from the token) must
// not hold back the others: the chaos run's fake GitHub once lost a payload,
// and every later pass stopped at that GUID, leaving thousands of failed
// deliveries unredelivered.
func TestPassGoesOnPastADeliveryNotFound(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	f, srv := newFake(t, "/repos/octo-org/app/hooks/42", clk.Now)
	gone := f.add("a-gone", clk.Now().Add(-3*time.Minute), 503, false)
	b := f.add("b", clk.Now().Add(-2*time.Minute), 503, false)
	c := f.add("c", clk.Now().Add(-time.Minute), 0, false)
	f.gone = map[int64]bool{gone: true}
	f.gatewayStatus = 202
	r := newRedeliverer(t, srv, githubredeliver.RepoHook("octo-org", "app", 42), clk, githubredeliver.Options{InitialBackoff: 10 * time.Minute})
	ctx := context.Background()

	res, err := r.Pass(ctx)
	var apiErr *githubredeliver.APIError
	require.ErrorAs(t, err, &apiErr, "the pass reports the 404")
	assert.Equal(t, http.StatusNotFound, apiErr.Status)
	assert.Equal(t, []string{"b", "c"}, res.Redelivered, "the others are redelivered")
	assert.Equal(t, []string{"a-gone"}, res.Waiting)
	assert.ElementsMatch(t, []int64{b, c}, f.Posts(), "the redeliveries GitHub accepted")

	clk.Add(time.Minute)
	res, err = r.Pass(ctx)
	require.NoError(t, err, "within its backoff the missing delivery is not asked for")
	assert.Equal(t, []string{"b", "c"}, res.Succeeded)
	assert.Equal(t, []string{"a-gone"}, res.Waiting)
	assert.Len(t, f.Posts(), 2)

	clk.Add(10 * time.Minute)
	f.mu.Lock()
	delete(f.gone, gone) // back
	f.mu.Unlock()
	res, err = r.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"a-gone"}, res.Redelivered, "asked for again after its backoff")
	assert.Contains(t, f.Posts(), gone)
}

func TestPassHonoursRateLimits(t *testing.T) {
	clk := &clock{t: time.Now()}
	f, srv := newFake(t, "/app/hook", clk.Now)
	f.add("g1", clk.Now().Add(-time.Minute), 503, false)

	// A secondary rate limit with Retry-After: wait it, then go on.
	f.limit = func(w http.ResponseWriter) bool {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"message":"You have exceeded a secondary rate limit."}`))
		return true
	}
	r := newRedeliverer(t, srv, githubredeliver.AppHook(), &clock{t: time.Now()}, githubredeliver.Options{
		TokenFunc: func(context.Context) (string, error) { return token, nil },
	})
	start := time.Now()
	res, err := r.Pass(context.Background())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), time.Second, "waited Retry-After")
	assert.Equal(t, []string{"g1"}, res.Redelivered)

	// The primary limit exhausted, reset in an hour: the pass ends with
	// the reset time, and nothing is requested.
	f.add("g2", clk.Now(), 503, false)
	reset := time.Now().Add(time.Hour).Truncate(time.Second)
	f.limit = func(w http.ResponseWriter) bool {
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"message":"API rate limit exceeded for user ID 1."}`))
		return true
	}
	_, err = r.Pass(context.Background())
	var rl *githubredeliver.RateLimitError
	require.ErrorAs(t, err, &rl)
	assert.ErrorIs(t, err, githubredeliver.ErrRateLimited)
	assert.True(t, rl.Until.Equal(reset))
	assert.Len(t, f.Posts(), 1)

	// A 403 that is not a rate limit is an API error, not a wait.
	f.limit = func(w http.ResponseWriter) bool {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"message":"Must have admin rights to Repository."}`))
		return true
	}
	_, err = r.Pass(context.Background())
	var apiErr *githubredeliver.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusForbidden, apiErr.Status)
}

// A successful answer that used the last request of the hour: its data is
// kept, and the next request waits for the reset (here: longer than
// MaxWait, so the pass ends with the reset time and saves what it saw).
func TestPassStopsWhenRequestsRunOut(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	f, srv := newFake(t, "/app/hook", clk.Now)
	f.add("g1", clk.Now().Add(-time.Minute), 503, false)
	f.exhaustNext = true
	r := newRedeliverer(t, srv, githubredeliver.AppHook(), clk, githubredeliver.Options{})
	res, err := r.Pass(context.Background())
	var rl *githubredeliver.RateLimitError
	require.ErrorAs(t, err, &rl)
	assert.True(t, rl.Until.Equal(clk.Now().Add(time.Hour)), "until %v", rl.Until)
	assert.Equal(t, []string{"g1"}, res.Waiting)
	assert.Empty(t, f.Posts(), "no request past the limit")

	clk.Add(time.Hour)
	res, err = r.Pass(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 0, res.Listed, "the cursor was saved with the first pass")
	assert.Equal(t, []string{"g1"}, res.Redelivered)
}

func TestPassRefusesForeignLink(t *testing.T) {
	clk := &clock{t: time.Now()}
	f, srv := newFake(t, "/app/hook", clk.Now)
	f.add("g1", clk.Now(), 503, false)
	f.limit = func(w http.ResponseWriter) bool {
		w.Header().Set("Link", `<https://evil.example/app/hook/deliveries?cursor=v1_1>; rel="next"`)
		_ = json.NewEncoder(w).Encode([]delivery{{ID: 5000, GUID: "x", DeliveredAt: clk.Now(), StatusCode: 503}})
		return true
	}
	r := newRedeliverer(t, srv, githubredeliver.AppHook(), clk, githubredeliver.Options{PerPage: 1})
	_, err := r.Pass(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "evil.example")
	assert.Empty(t, f.Posts())
}

func TestWrongTokenFailsThePass(t *testing.T) {
	clk := &clock{t: time.Now()}
	_, srv := newFake(t, "/app/hook", clk.Now)
	r := newRedeliverer(t, srv, githubredeliver.AppHook(), clk, githubredeliver.Options{Token: "wrong"})
	_, err := r.Pass(context.Background())
	var apiErr *githubredeliver.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusUnauthorized, apiErr.Status)
}

// The state survives a restart in a checkpoint.Storage: a new Redeliverer
// on the same storage does not request again what the first requested.
func TestCheckpointStateAcrossRestart(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	f, srv := newFake(t, "/repos/o/r/hooks/1", clk.Now)
	f.add("g1", clk.Now().Add(-time.Minute), 503, false)
	storage := checkpoint.NewMemoryStorage()
	state := githubredeliver.CheckpointState{Storage: storage, Name: "githubredeliver/o/r/1"}
	for range 2 {
		r := newRedeliverer(t, srv, githubredeliver.RepoHook("o", "r", 1), clk, githubredeliver.Options{State: state})
		_, err := r.Pass(context.Background())
		require.NoError(t, err)
	}
	assert.Len(t, f.Posts(), 1, "the restarted redeliverer waited for the first request")

	require.NoError(t, storage.Put(context.Background(), "githubredeliver/o/r/1", []byte("{")))
	_, err := state.Load(context.Background())
	assert.ErrorIs(t, err, githubredeliver.ErrCorrupt)
}

func TestRunStopsWithContext(t *testing.T) {
	clk := &clock{t: time.Now()}
	f, srv := newFake(t, "/app/hook", clk.Now)
	f.add("g1", clk.Now(), 503, false)
	f.gatewayStatus = 202
	r := newRedeliverer(t, srv, githubredeliver.AppHook(), clk, githubredeliver.Options{Interval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.gets >= 3
	}, 5*time.Second, 5*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	assert.Len(t, f.Posts(), 1)
}

func TestNewValidates(t *testing.T) {
	for _, tt := range []struct {
		name string
		hook githubredeliver.Hook
		opts githubredeliver.Options
	}{
		{"no hook", githubredeliver.Hook{}, githubredeliver.Options{Token: "t"}},
		{"no token", githubredeliver.AppHook(), githubredeliver.Options{}},
		{"bad base URL", githubredeliver.AppHook(), githubredeliver.Options{Token: "t", BaseURL: "::"}},
		{"per page", githubredeliver.AppHook(), githubredeliver.Options{Token: "t", PerPage: 101}},
		{"negative window", githubredeliver.AppHook(), githubredeliver.Options{Token: "t", Window: -1}},
	} {
		_, err := githubredeliver.New(tt.hook, tt.opts)
		assert.ErrorIs(t, err, githubredeliver.ErrInvalidOptions, tt.name)
	}
}

// The gateway's permanent answers are not redelivered: 413 (a payload too
// large for Kafka and no claim check), 422, 400, 401; its transient ones
// are: 408 (a body cut at the read deadline), 429, 503, and no answer.
func TestDefaultRetryableFollowsTheGateway(t *testing.T) {
	tests := []struct {
		give int
		want bool
	}{
		{0, true}, {408, true}, {429, true}, {500, true}, {503, true},
		{400, false}, {401, false}, {404, false}, {413, false}, {422, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, githubredeliver.DefaultRetryable(tt.give), "status %d", tt.give)
	}
}
