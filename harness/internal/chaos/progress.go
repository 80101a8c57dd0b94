package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// faultProgress is the share of the fault schedule done, counting the
// fault under way by the time it has taken against the mean so far, so that
// deliveries flow during each fault rather than in bursts between them.
func (c *chaos) faultProgress(total int) float64 {
	done := c.faults.Load()
	start := c.strikeStart.Load()
	if start == 0 {
		return 0
	}
	now := time.Now().UnixNano()
	mean := float64(now-start) / float64(max(done, 1))
	if done == 0 {
		mean = float64(time.Second)
	}
	part := min(float64(now-c.lastFault.Load())/mean, 1)
	return (float64(done) + part) / float64(total)
}

// watchGateway restarts the gateway when it exits on its own, as a service
// manager would, and says why it stopped (the runs found gateways dying
// with no word while servers around them were killed).
func (c *chaos) watchGateway(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.gwMu.Lock()
		gw := c.d.Gateway
		if exited, err := gw.Exited(); exited {
			c.mu.Lock()
			c.res.GatewayExits++
			c.mu.Unlock()
			c.say("gateway pid %d exited on its own (%v); restarting it", gw.PID(), err)
			if serr := c.d.StartGateway(context.WithoutCancel(ctx), false); serr != nil {
				c.say("restart the gateway: %v", serr)
			} else {
				c.d.Provider.SetBaseURL(c.d.Gateway.URL())
			}
		}
		c.gwMu.Unlock()
	}
}

func faultsFinished(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// progress keeps the live line up to date until ctx ends.
func (c *chaos) progress(ctx context.Context) {
	tty := isTerminal(c.cfg.Stdout)
	every := 10 * time.Second
	if tty {
		every = 500 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := int64(0)
		for i := range c.sentAt {
			if c.sentAt[i].Load() != 0 {
				sent++
			}
		}
		line := fmt.Sprintf("[%7.1fs] events %d/%d sent, %d accepted; faults %d; %s", time.Since(c.began).Seconds(),
			sent, c.cfg.Events, c.delivered.Load(), c.faults.Load(), c.statusLine())
		c.mu.Lock()
		if tty {
			fmt.Fprintf(c.cfg.Stdout, "\r\033[K%s", line)
		} else {
			fmt.Fprintln(c.cfg.Stdout, line)
		}
		c.mu.Unlock()
	}
}

func (c *chaos) statusLine() string {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	return c.status
}

func (c *chaos) setStatus(s string) {
	c.statusMu.Lock()
	c.status = s
	c.statusMu.Unlock()
}

// isTerminal reports whether w is a terminal (for the live line).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
