package idempotency

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// keeper extends a claim whose side effect outlived its answer, every
// third of PendingTTL, until the side effect ends (see [Extender]).
type keeper struct {
	mu      sync.Mutex // held while extending, so stop waits for it
	stopped bool
	t       *time.Timer
}

// keep starts extending c at once, or returns nil when the store cannot.
func (h *Handler) keep(ctx context.Context, c Claim) *keeper {
	ext, ok := h.store.(Extender)
	if !ok {
		return nil
	}
	k := &keeper{}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.t = time.AfterFunc(0, func() { k.extend(ctx, h, ext, c) })
	return k
}

func (k *keeper) extend(ctx context.Context, h *Handler, ext Extender, c Claim) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, h.opts.StoreTimeout)
	err := ext.Extend(cctx, c, h.opts.PendingTTL)
	cancel()
	if errors.Is(err, ErrClaimLost) {
		h.m.lost(ctx, "extend")
		h.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: claim lost while its side effect ran on; a retry may duplicate",
			slog.String("key", c.Key))
		return
	}
	if err != nil {
		// Tried again at the next tick, well within PendingTTL.
		h.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: extending a claim failed",
			slog.String("key", c.Key), slog.Any("error", err))
	}
	k.t.Reset(h.opts.PendingTTL / 3)
}

// stop ends the extensions and waits for one in progress. It is a no-op
// on nil.
func (k *keeper) stop() {
	if k == nil {
		return
	}
	k.mu.Lock()
	k.stopped = true
	k.t.Stop()
	k.mu.Unlock()
}
