package main

// Towards the upstream: register as a relay (the same challenge as a probe, RegisterRequest.relay
// set), announce the roster (all of it first, then changes at most every --roster seconds),
// heartbeat at the interval Register hands out, and serve OpenWindow / CloseWindow / Shutdown.
// Upstreams are a list: when one fails the next is tried, same relay id, after a jittered,
// bounded wait (backoff, below); more than --retries failures in a row end the relay.

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"swarmscope.dev/relayd/pb"
)

type relay struct {
	c    *config
	f    *fleet
	dial grpc.DialOption
}

// fatalErr: not worth another upstream (an upstream that cannot prove it holds the token).
type fatalErr struct{ error }

func (r *relay) runForever(ctx context.Context) error {
	failures, i := 0, 0
	n := len(r.c.upstreams)
	waits := &backoff{base: 0.5, cap: 8, upstreams: n, last: 0.5}
	for ctx.Err() == nil {
		target := r.c.upstreams[i%n]
		started := time.Now()
		done, err := r.serve(ctx, target)
		if done || ctx.Err() != nil {
			return nil
		}
		var fe fatalErr
		if errors.As(err, &fe) {
			return fe.error
		}
		last := "upstream ended the session"
		if err != nil {
			last = err.Error()
		}
		if time.Since(started) > 10*time.Second {
			failures = 1
		} else {
			failures++
		}
		if failures > r.c.retries {
			return fmt.Errorf("relay: every upstream failed %d times (last: %s)", r.c.retries, last)
		}
		if time.Since(started) > 10*time.Second {
			waits.reset()
		}
		i++
		logf("upstream %s: %s; trying %s", target, last, r.c.upstreams[i%n])
		select {
		case <-ctx.Done():
		case <-time.After(seconds(waits.next(failures))):
		}
	}
	return nil
}

func (r *relay) register(ctx context.Context, conn *grpc.ClientConn, target string) (*pb.RegisterReply, error) {
	nonce := randomBytes(16)
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hello := &pb.HelloReply{}
	if err := conn.Invoke(hctx, svc+"Hello", &pb.HelloRequest{ProbeNonce: nonce, ProbeId: r.c.relayID}, hello); err != nil {
		return nil, fmt.Errorf("Hello: %s", status.Code(err))
	}
	want := mac(r.c.token, []byte("swarmscope/v1 controller"), nonce, hello.GetServerNonce())
	if !hmac.Equal(want, hello.GetProof()) {
		return nil, fatalErr{fmt.Errorf("upstream %s failed to prove it holds the token: refusing it", target)}
	}
	host, _ := os.Hostname()
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	req := &pb.RegisterRequest{
		ProbeId: r.c.relayID, Hostname: host, NodeName: r.c.relayID,
		KernelRelease: unix.ByteSliceToString(uts.Release[:]), Nonce: nonce, Version: "relayd",
		ServerNonce: hello.GetServerNonce(), Relay: true,
		Proof: mac(r.c.token, []byte("swarmscope/v1 probe"), hello.GetServerNonce(), nonce, []byte(r.c.relayID)),
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	reply := &pb.RegisterReply{}
	if err := conn.Invoke(rctx, svc+"Register", req, reply); err != nil {
		return nil, fmt.Errorf("Register: %s", status.Code(err))
	}
	return reply, nil
}

// serve: one upstream session; true when told to shut down.
func (r *relay) serve(ctx context.Context, target string) (bool, error) {
	conn, err := grpc.NewClient("passthrough:///"+target, r.dial,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)))
	if err != nil {
		return false, err
	}
	defer conn.Close()
	reply, err := r.register(ctx, conn, target)
	if err != nil {
		return false, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := conn.NewStream(sctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, svc+"Session")
	if err != nil {
		return false, fmt.Errorf("Session: %s", status.Code(err))
	}
	out := make(chan *pb.ProbeMessage, 1024)
	emit := func(m *pb.ProbeMessage) {
		select {
		case out <- m:
		case <-sctx.Done(): // this session is over: its answers go nowhere, as the Python relay's
		}
	}
	// The whole roster first (a new upstream knows nothing of us), then changes.
	roster := r.f.fullRoster()
	go func() { // the only SendMsg caller
		if stream.SendMsg(&pb.ProbeMessage{SessionId: reply.GetSessionId(), Kind: &pb.ProbeMessage_Roster{Roster: roster}}) != nil {
			cancel()
			return
		}
		for {
			select {
			case <-sctx.Done():
				return
			case m := <-out:
				if stream.SendMsg(m) != nil {
					cancel() // the receive side sees the error
					return
				}
			}
		}
	}()
	beatEvery := seconds(reply.GetHeartbeatIntervalS())
	if beatEvery <= 0 {
		beatEvery = r.c.heartbeat
	}
	go func() {
		t := time.NewTicker(r.c.rosterEvery)
		defer t.Stop()
		beat := time.Time{}
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
			if time.Since(beat) >= beatEvery {
				beat = time.Now()
				emit(&pb.ProbeMessage{Kind: &pb.ProbeMessage_Heartbeat{Heartbeat: &pb.Heartbeat{UnixNs: uint64(beat.UnixNano())}}})
			}
			if ros := r.f.drain(); ros != nil {
				emit(&pb.ProbeMessage{Kind: &pb.ProbeMessage_Roster{Roster: ros}})
			}
		}
	}()
	for {
		cmd := &pb.Command{}
		if err := stream.RecvMsg(cmd); err != nil {
			if ctx.Err() != nil {
				return true, nil
			}
			if errors.Is(err, io.EOF) {
				return false, nil
			}
			return false, fmt.Errorf("%s", status.Code(err))
		}
		switch k := cmd.GetKind().(type) {
		case *pb.Command_Open:
			r.f.open(k.Open, emit)
		case *pb.Command_Close:
			r.f.close(k.Close, emit)
		case *pb.Command_Shutdown:
			r.f.shutdownProbes(k.Shutdown.GetReason())
			return true, nil
		}
	}
}

// backoff: the waits between upstreams, as probes/backoff.py's (docs/scale-out.md, "Reconnects
// are jittered"): moving on within a round waits uniformly in [0, base] (full jitter); after a
// whole round failed, uniformly in [base, 3 x the previous wait] (decorrelated jitter), capped.
// Relays that lost one upstream at one instant then do not all register with the next at once.
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
