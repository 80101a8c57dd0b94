package kafkafault

import (
	"encoding/binary"
	"net"
	"sync"
	"time"
)

// listener passes accepted connections through the injector.
type listener struct {
	net.Listener
	inj *Injector
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	fc := &conn{Conn: c, inj: l.inj, keys: map[int32]int16{}}
	l.inj.track(fc)
	return fc, nil
}

// maxPending bounds the correlation ids remembered per connection: answers
// that never come (acks=0 produce requests) must not grow the map forever.
const maxPending = 1024

// conn is a broker-side client connection. It reads the header of every
// request that goes by (api key and correlation id) so that, when the broker
// writes an answer, it knows what the answer is for.
type conn struct {
	net.Conn
	inj *Injector

	// Request framing state, touched only by the goroutine reading.
	hdr    [12]byte // size (4), api key (2), api version (2), correlation id (4)
	hdrN   int
	skip   int    // body bytes of the current request left after the header
	body   []byte // the current request's rest, kept for group requests (see watched)
	keep   bool   // whether the current request's rest goes to body
	broken bool   // a frame made no sense: stop parsing, pass bytes through

	mu   sync.Mutex
	keys map[int32]int16 // correlation id -> api key of requests not yet answered

	closeOnce sync.Once
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.parse(p[:n])
	return n, err
}

// parse follows the request frames in b.
func (c *conn) parse(b []byte) {
	for len(b) > 0 && !c.broken {
		if c.skip > 0 {
			n := min(c.skip, len(b))
			if c.keep {
				c.body = append(c.body, b[:n]...)
			}
			c.skip -= n
			b = b[n:]
			if c.skip == 0 && c.keep {
				c.inj.members.observe(int16(binary.BigEndian.Uint16(c.hdr[4:6])),
					int16(binary.BigEndian.Uint16(c.hdr[6:8])), c.body, c.RemoteAddr().String())
				c.body, c.keep = c.body[:0], false
			}
			continue
		}
		n := copy(c.hdr[c.hdrN:], b)
		c.hdrN += n
		b = b[n:]
		if c.hdrN < len(c.hdr) {
			return
		}
		c.hdrN = 0
		size := int(binary.BigEndian.Uint32(c.hdr[0:4]))
		if size < 8 {
			c.broken = true
			return
		}
		c.skip = size - 8
		key := int16(binary.BigEndian.Uint16(c.hdr[4:6]))
		c.keep = watched(key) && c.skip <= maxWatched
		corr := int32(binary.BigEndian.Uint32(c.hdr[8:12]))
		c.mu.Lock()
		if len(c.keys) >= maxPending {
			clear(c.keys)
		}
		c.keys[corr] = key
		c.mu.Unlock()
	}
}

// Write writes one answer frame (kfake writes each answer whole), after the
// injector decided whether to hold it back or lose it.
func (c *conn) Write(p []byte) (int, error) {
	if len(p) < 8 {
		return c.Conn.Write(p)
	}
	corr := int32(binary.BigEndian.Uint32(p[4:8]))
	c.mu.Lock()
	key, ok := c.keys[corr]
	delete(c.keys, corr)
	c.mu.Unlock()
	if !ok {
		key = -1
	}
	delay, lose := c.inj.answer(key)
	if delay > 0 {
		time.Sleep(delay)
	}
	if lose {
		_ = c.Close()
		return 0, errLostAck
	}
	return c.Conn.Write(p)
}

func (c *conn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.inj.untrack(c)
		err = c.Conn.Close()
	})
	return err
}
