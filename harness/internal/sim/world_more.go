package sim

import (
	"github.com/exactlyonce/exactlyonce/window"
)

func (p *proc) endInput() {
	var out window.Output[int, uint64]
	p.win.track(p.next)
	p.op.EndInput(&out)
	p.win.add(p.next, out.Rows)
	out.Reset()
	p.hwin.track(p.next)
	p.hop.EndInput(&out)
	p.hwin.add(p.next, out.Rows)
	p.ended = true
	p.w.logf("proc %d: end of input", p.n)
}

// flush is the sinks' flush timer.
func (p *proc) flush() {
	for _, f := range []func() error{p.win.flush, p.hwin.flush, p.chs.flush} {
		if err := f(); err != nil {
			p.fail(err)
			return
		}
	}
}
