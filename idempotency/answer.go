package idempotency

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// answer is the one response of a request, which may be sent before the
// handler is done with the key.
type answer struct {
	w      http.ResponseWriter
	mu     sync.Mutex // the deadline's timer and the side effect may race to answer
	now    func() time.Time
	status int // 0 until answered
	at     time.Time
}

// send writes resp unless the request was answered already, and flushes it
// so the client has it while the key is settled. It reports whether it
// answered.
func (a *answer) send(resp Response, header ...string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.status != 0 {
		return false
	}
	for i := 0; i+1 < len(header); i += 2 {
		a.w.Header().Set(header[i], header[i+1])
	}
	a.status = writeResponse(a.w, resp)
	a.at = a.now()
	_ = http.NewResponseController(a.w).Flush() // unsupported by some test writers: sent on return
	return true
}

func (a *answer) text(status int, msg string, header ...string) bool {
	return a.send(textResponse(status, msg), header...)
}

func rejectStatus(err error) (int, string) {
	var ne net.Error
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return http.StatusRequestTimeout, "read_timeout"
	case errors.Is(err, ErrBodyTooLarge):
		return http.StatusRequestEntityTooLarge, "too_large"
	case errors.Is(err, ErrSignature):
		return http.StatusUnauthorized, "signature"
	case errors.Is(err, ErrMediaType):
		return http.StatusUnsupportedMediaType, "content_type"
	case errors.Is(err, ErrNoKey):
		return http.StatusBadRequest, "key"
	case errors.Is(err, ErrMalformed):
		return http.StatusBadRequest, "malformed"
	default:
		return http.StatusBadRequest, "read"
	}
}

// acceptedResponse is the response stored with a done key and replayed:
// {"status":"accepted","delivery":<key>}, byte for byte what json.Marshal
// makes of it. A key of plain ASCII (every provider's delivery ids) is
// copied in as it is, in one allocation; any other goes through
// encoding/json, which escapes it.
func acceptedResponse(key string) Response {
	const head, tail = `{"status":"accepted","delivery":"`, `"}`
	var body []byte
	if jsonPlain(key) {
		body = make([]byte, 0, len(head)+len(key)+len(tail))
		body = append(append(append(body, head...), key...), tail...)
	} else {
		body, _ = json.Marshal(struct {
			Status   string `json:"status"`
			Delivery string `json:"delivery"`
		}{"accepted", key}) // cannot fail: two strings
	}
	return Response{Status: http.StatusAccepted, ContentType: "application/json", Body: body}
}

// jsonPlain reports whether json.Marshal writes s between its quotes as it
// is: printable ASCII without the quote, the backslash, and the <, > and &
// that it escapes for HTML.
func jsonPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

func writeResponse(w http.ResponseWriter, r Response) int {
	if r.ContentType != "" {
		w.Header().Set("Content-Type", r.ContentType)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(r.Body)))
	w.WriteHeader(r.Status)
	_, _ = w.Write(r.Body) // the client may be gone; the outcome is stored
	return r.Status
}

func textResponse(status int, msg string) Response {
	return Response{Status: status, ContentType: "text/plain; charset=utf-8", Body: []byte(msg + "\n")}
}
