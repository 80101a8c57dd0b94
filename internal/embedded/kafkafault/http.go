package kafkafault

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Path is where Handler serves: POST a Fault as JSON to inject it, DELETE
// to Clear, GET for the Stats as JSON.
const Path = "/faults"

// Handler serves the injector's control endpoint at Path. A rejected fault
// is answered 400 with the reason.
func (i *Injector) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+Path, func(w http.ResponseWriter, r *http.Request) {
		var f Fault
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&f); err != nil {
			http.Error(w, "kafkafault: bad fault: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := i.Inject(f); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE "+Path, func(w http.ResponseWriter, _ *http.Request) {
		i.Clear()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+Path, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(i.Stats())
	})
	return mux
}

// Client drives an injector served by Handler, in another process.
type Client struct {
	// URL is the endpoint's base, such as http://127.0.0.1:port.
	URL string
	// HTTP is the client to use. Default: http.DefaultClient.
	HTTP *http.Client
}

// ErrRejected is wrapped by Client errors for a fault the injector refused
// (the remote Inject's ErrInvalid, ErrUnknownKind or ErrNotAttached).
var ErrRejected = errors.New("kafkafault: fault rejected")

// Inject arms f in the remote injector.
func (c Client) Inject(ctx context.Context, f Fault) error {
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("kafkafault: %w", err)
	}
	return c.do(ctx, http.MethodPost, b, nil)
}

// Clear disarms every fault of the remote injector.
func (c Client) Clear(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, nil, nil)
}

// Stats returns the remote injector's Stats.
func (c Client) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	err := c.do(ctx, http.MethodGet, nil, &s)
	return s, err
}

func (c Client) do(ctx context.Context, method string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.URL, "/")+Path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("kafkafault: %w", err)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("kafkafault: %s %s: %w", method, c.URL, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("kafkafault: %s %s: %w", method, c.URL, err)
	}
	switch {
	case resp.StatusCode == http.StatusBadRequest:
		return fmt.Errorf("%w: %s", ErrRejected, strings.TrimSpace(string(data)))
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("kafkafault: %s %s: %s: %s", method, c.URL, resp.Status, strings.TrimSpace(string(data)))
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("kafkafault: stats: %w", err)
		}
	}
	return nil
}
