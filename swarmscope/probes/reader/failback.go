package main

// Failback, as probes/failback.py: a session served by a later upstream of "a,b,..." checks the
// first one every --failback seconds (jittered x0.5-1.5) with a Hello whose proof it checks, and
// when that answers, waits for a moment with no open window and ends the session; runForever then
// dials upstreams[0] without counting a failure. Why: a probe that started before its relay was
// ready, or outlived it, would otherwise stay on the controller for good.

import (
	"context"
	"crypto/hmac"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"

	"swarmscope.dev/probereader/pb"
)

const idlePoll = 200 * time.Millisecond

func (a *agent) failback(ctx context.Context, ended <-chan struct{}, cancel context.CancelFunc) {
	if a.c.failback <= 0 {
		return
	}
	for {
		wait := time.Duration(float64(a.c.failback) * (0.5 + rand.Float64()))
		select {
		case <-ended:
			return
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if !a.homeAnswers(ctx) {
			continue
		}
		for a.openN.Load() > 0 { // between windows only
			select {
			case <-ended:
				return
			case <-ctx.Done():
				return
			case <-time.After(idlePoll):
			}
		}
		a.moved.Store(true)
		cancel()
		return
	}
}

// homeAnswers: upstreams[0] answers Hello and proves it holds the token (nothing registered).
func (a *agent) homeAnswers(ctx context.Context) bool {
	opt, err := a.creds()
	if err != nil {
		return false
	}
	conn, err := grpc.NewClient("passthrough:///"+a.c.upstreams[0], opt)
	if err != nil {
		return false
	}
	defer conn.Close()
	nonce := randomBytes(16)
	hello := &pb.HelloReply{}
	cctx, done := context.WithTimeout(ctx, rpcTimeout)
	defer done()
	if conn.Invoke(cctx, svc+"Hello", &pb.HelloRequest{ProbeNonce: nonce, ProbeId: a.c.probeID}, hello) != nil {
		return false
	}
	want := mac(a.c.token, []byte("swarmscope/v1 controller"), nonce, hello.GetServerNonce())
	return hmac.Equal(want, hello.GetProof())
}
