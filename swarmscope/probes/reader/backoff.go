package main

// Waits between reconnects, with the rules of probes/backoff.py (its docstring is the
// reference): moving on to the next upstream of a round waits a spread in [0, base]; after a
// whole round failed, decorrelated jitter in [base, 3 x the previous wait], capped. So a fleet
// of readers that lost one relay does not register with the next upstream in one instant.

import (
	"math"
	"math/rand/v2"
)

type backoff struct {
	base, cap, last float64
	upstreams       int
}

func (b *backoff) reset() { b.last = b.base }

func (b *backoff) next(failures int) float64 {
	if failures%b.upstreams != 0 {
		return rand.Float64() * b.base
	}
	w := math.Min(b.cap, math.Max(b.base, b.base+rand.Float64()*(3*b.last-b.base)))
	b.last = w
	return w
}
