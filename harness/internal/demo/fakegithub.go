package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/exactlyonce/exactlyonce/idempotency/githubredeliver"
)

// The demo's GitHub webhook: one repository hook.
const (
	ghHookOwner = "acme"
	ghHookRepo  = "webhooks"
	ghHookID    = 30991
	ghToken     = "demo-token"
)

// fakeGitHub is the demo's GitHub. It sends each webhook once, as GitHub
// does: a delivery answered non-2xx (or not answered) is recorded as failed
// and never retried by GitHub itself. It records every delivery with its
// status code, and serves the two REST API endpoints a redeliverer uses,
// shaped as GitHub documents them:
//
//	GET  /repos/{owner}/{repo}/hooks/{hook_id}/deliveries?per_page=&cursor=
//	POST /repos/{owner}/{repo}/hooks/{hook_id}/deliveries/{delivery_id}/attempts
//
// The list is newest first, paginated with a Link header rel="next"; a
// redelivery request is answered 202 and sends the delivery again, with
// the same GUID, as a new delivery whose redelivery field is true.
type fakeGitHub struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
	send func(ctx context.Context, d Delivery) (int, error) // one POST to the gateway
	ctx  context.Context                                    // ends the redeliveries in flight
	stop context.CancelFunc

	mu         sync.Mutex
	deliveries []hookDelivery // by id, ascending
	// payloads are every GUID's payload, as GitHub keeps them (for 3
	// days): the delivery without its body, which is in bodies, a file,
	// since a long chaos run sends gigabytes of them.
	payloads   map[string]storedPayload
	bodies     *os.File
	bodiesEnd  int64
	succeeded  map[string]bool // GUIDs with a 2xx delivery
	open       map[string]int  // GUIDs without one whose last answer asks for a redelivery: that status
	failed     map[string]bool // GUIDs with a delivery that failed (503 or no answer)
	inflight   sync.WaitGroup
	redelivers int
}

// storedPayload locates a delivery's body in fakeGitHub.bodies.
type storedPayload struct {
	d   Delivery // without its Body
	off int64
	n   int
}

// hookDelivery is one entry of GitHub's "list deliveries for a repository
// webhook" response.
type hookDelivery struct {
	ID           int64     `json:"id"`
	GUID         string    `json:"guid"`
	DeliveredAt  time.Time `json:"delivered_at"`
	Redelivery   bool      `json:"redelivery"`
	Duration     float64   `json:"duration"`
	Status       string    `json:"status"`
	StatusCode   int       `json:"status_code"`
	Event        string    `json:"event"`
	Action       *string   `json:"action"`
	RepositoryID int64     `json:"repository_id"`
}

func startFakeGitHub(send func(ctx context.Context, d Delivery) (int, error)) (*fakeGitHub, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	bodies, err := os.CreateTemp("", "fakegithub-payloads-")
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	_ = os.Remove(bodies.Name()) // gone with the process, whatever happens
	ctx, stop := context.WithCancel(context.Background())
	g := &fakeGitHub{ln: ln, done: make(chan error, 1), send: send, ctx: ctx, stop: stop, bodies: bodies,
		payloads: map[string]storedPayload{}, succeeded: map[string]bool{}, open: map[string]int{}, failed: map[string]bool{}}
	mux := http.NewServeMux()
	base := fmt.Sprintf("/repos/%s/%s/hooks/%d/deliveries", ghHookOwner, ghHookRepo, ghHookID)
	mux.HandleFunc("GET "+base, g.list)
	mux.HandleFunc("POST "+base+"/{id}/attempts", g.attempt)
	g.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { g.done <- g.srv.Serve(ln) }()
	return g, nil
}

func (g *fakeGitHub) URL() string { return "http://" + g.ln.Addr().String() }

// Close stops the API and waits for the redeliveries in flight.
func (g *fakeGitHub) Close() error {
	g.stop()
	err := g.srv.Close()
	if serr := <-g.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	g.inflight.Wait()
	return errors.Join(err, g.bodies.Close())
}

// deliver sends d once and records the outcome, as GitHub does.
func (g *fakeGitHub) deliver(ctx context.Context, d Delivery, redelivery bool) int {
	g.mu.Lock()
	if _, ok := g.payloads[d.ID]; !ok {
		if _, err := g.bodies.WriteAt(d.Body, g.bodiesEnd); err != nil {
			g.mu.Unlock()
			return 0 // as if GitHub failed to send it; nothing to redeliver from
		}
		sp := storedPayload{d: d, off: g.bodiesEnd, n: len(d.Body)}
		sp.d.Body = nil
		g.payloads[d.ID] = sp
		g.bodiesEnd += int64(len(d.Body))
	}
	g.mu.Unlock()
	start := time.Now()
	status, err := g.send(ctx, d)
	if err != nil {
		status = 0 // no answer: GitHub records a timeout or a failed connection
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	text := "OK"
	switch {
	case status/100 == 2:
		g.succeeded[d.ID] = true
		delete(g.open, d.ID)
	case g.succeeded[d.ID]:
	case status == 0 || retried(status):
		g.open[d.ID] = status
	default:
		delete(g.open, d.ID) // a final 4xx: nothing to redeliver
	}
	if status == 0 || retried(status) {
		g.failed[d.ID] = true
	}
	if status/100 != 2 {
		text = "Invalid HTTP Response: " + strconv.Itoa(status)
		if status == 0 {
			text = "We couldn't deliver this payload: " + fmt.Sprint(err)
		}
	}
	var action *string
	var a struct {
		Action *string `json:"action"`
	}
	if json.Unmarshal(d.Body, &a) == nil {
		action = a.Action
	}
	g.deliveries = append(g.deliveries, hookDelivery{
		ID: int64(len(g.deliveries) + 1), GUID: d.ID, DeliveredAt: start.UTC().Truncate(time.Second), Redelivery: redelivery,
		Duration: time.Since(start).Seconds(), Status: text, StatusCode: status, Event: d.EventType, Action: action, RepositoryID: 186853002,
	})
	return status
}

func (g *fakeGitHub) authorized(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Authorization") != "Bearer "+ghToken {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest"}`))
		return false
	}
	return true
}

func (g *fakeGitHub) list(w http.ResponseWriter, r *http.Request) {
	if !g.authorized(w, r) {
		return
	}
	perPage, err := strconv.Atoi(r.URL.Query().Get("per_page"))
	if err != nil || perPage < 1 || perPage > 100 {
		perPage = 30
	}
	cursor := int64(1 << 62)
	if c := r.URL.Query().Get("cursor"); c != "" {
		if cursor, err = strconv.ParseInt(c, 10, 64); err != nil {
			http.Error(w, `{"message":"Bad cursor"}`, http.StatusBadRequest)
			return
		}
	}
	g.mu.Lock()
	var page []hookDelivery
	for i := len(g.deliveries) - 1; i >= 0 && len(page) <= perPage; i-- {
		if g.deliveries[i].ID < cursor {
			page = append(page, g.deliveries[i])
		}
	}
	g.mu.Unlock()
	if len(page) > perPage {
		next := *r.URL
		q := next.Query()
		q.Set("cursor", strconv.FormatInt(page[perPage].ID+1, 10))
		next.RawQuery = q.Encode()
		w.Header().Set("Link", fmt.Sprintf(`<%s%s>; rel="next"`, g.URL(), next.RequestURI()))
		page = page[:perPage]
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-RateLimit-Remaining", "4999")
	_ = json.NewEncoder(w).Encode(page)
}

func (g *fakeGitHub) attempt(w http.ResponseWriter, r *http.Request) {
	if !g.authorized(w, r) {
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	g.mu.Lock()
	var sp storedPayload
	ok := err == nil && id >= 1 && id <= int64(len(g.deliveries))
	if ok {
		sp, ok = g.payloads[g.deliveries[id-1].GUID]
	}
	if ok {
		g.redelivers++
		g.inflight.Add(1)
	}
	g.mu.Unlock()
	if !ok {
		http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
		return
	}
	go func() {
		defer g.inflight.Done()
		d := sp.d
		d.Body = make([]byte, sp.n)
		if _, err := g.bodies.ReadAt(d.Body, sp.off); err != nil {
			return // the redelivery fails to start, as one of GitHub's can
		}
		g.deliver(g.ctx, d, true)
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte("{}"))
}

// outstanding returns the GUIDs none of whose deliveries succeeded and whose
// last answer was not a final 4xx, how many GUIDs had a delivery that
// failed (503 or no answer), and how many redeliveries were requested.
func (g *fakeGitHub) outstanding() (guids []string, failed, redelivers int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for guid := range g.open {
		guids = append(guids, guid)
	}
	return guids, len(g.failed), g.redelivers
}

// StartGitHub starts the fake GitHub and a githubredeliver.Redeliverer
// against its REST API, a pass every 200 ms (GitHub's 3-day window and
// minutes of backoff compressed into the demo's seconds). Both stop at the
// end of the demo.
func (d *Pipeline) StartGitHub(ctx context.Context) error {
	gh, err := startFakeGitHub(func(ctx context.Context, dl Delivery) (int, error) {
		status, _, _, err := d.Provider.post(ctx, dl, 0)
		return status, err
	})
	if err != nil {
		return err
	}
	d.Provider.github = gh
	r, err := githubredeliver.New(githubredeliver.RepoHook(ghHookOwner, ghHookRepo, ghHookID), githubredeliver.Options{
		Token: ghToken, BaseURL: gh.URL(), HTTPClient: &http.Client{Timeout: 10 * time.Second},
		Interval: 200 * time.Millisecond, InitialBackoff: 300 * time.Millisecond, MaxBackoff: 2 * time.Second,
		Logger: d.Config.Logger,
	})
	if err != nil {
		_ = gh.Close()
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(rctx); err != nil && rctx.Err() == nil {
			d.Say("redeliverer stopped: %v", err)
		}
	}()
	d.Cleanups = append(d.Cleanups, func() { stop(); <-done; _ = gh.Close() })
	d.Say("GitHub (fake REST API on %s) sends each delivery once and never retries; a redeliverer lists hook %d's failed deliveries and requests their redelivery", gh.URL(), ghHookID)
	return nil
}

// AwaitGitHubRecovered waits until every GitHub delivery that failed has
// been redelivered successfully (or answered a final 4xx).
func (d *Pipeline) AwaitGitHubRecovered(ctx context.Context) error {
	// Thousands of failed deliveries after a long run take a while.
	timeout := max(ConvergeTimeout(), time.Duration(d.Config.Events/500)*time.Second)
	deadline := time.Now().Add(timeout)
	for {
		open, failed, redelivers := d.Provider.github.outstanding()
		if len(open) == 0 {
			d.Say("GitHub: %d deliveries failed (503 or no answer), which GitHub never retries; the redeliverer requested %d redeliveries through the REST API; every failed delivery has succeeded since",
				failed, redelivers)
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("GitHub: %d deliveries still failed after %v (the redeliverer requested %d redeliveries): %v",
				len(open), timeout, redelivers, open[:min(len(open), 5)])
		}
		time.Sleep(200 * time.Millisecond)
	}
}
