package githubredeliver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/exactlyonce/exactlyonce/idempotency/githubredeliver"
)

// One pass over a repository hook whose last delivery failed with 503 while
// the gateway's Kafka was down: its redelivery is requested once.
func ExampleRedeliverer_Pass() {
	deliveredAt := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	github := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method + " " + r.URL.Path {
		case "GET /repos/octo-org/app/hooks/42/deliveries":
			fmt.Fprintf(w, `[{"id":2,"guid":"b","delivered_at":%q,"redelivery":false,"duration":0.1,"status":"Invalid HTTP Response: 503","status_code":503,"event":"push","action":null,"installation_id":null,"repository_id":1},`+
				`{"id":1,"guid":"a","delivered_at":%q,"redelivery":false,"duration":0.1,"status":"OK","status_code":202,"event":"push","action":null,"installation_id":null,"repository_id":1}]`,
				deliveredAt, deliveredAt)
		case "POST /repos/octo-org/app/hooks/42/deliveries/2/attempts":
			fmt.Println("GitHub: redelivering delivery 2")
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprint(w, `{}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer github.Close()

	r, err := githubredeliver.New(githubredeliver.RepoHook("octo-org", "app", 42), githubredeliver.Options{
		Token:   "ghp_...",
		BaseURL: github.URL,
	})
	if err != nil {
		panic(err)
	}
	res, err := r.Pass(context.Background())
	fmt.Println("redelivered:", res.Redelivered, "error:", err)
	// Output:
	// GitHub: redelivering delivery 2
	// redelivered: [b] error: <nil>
}
