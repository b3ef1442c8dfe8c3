package main

// The ProbeControl service towards the probes, registered by hand over grpc.ServiceDesc (the
// reader hand-writes its client the same way): Hello, Register and Session as fleet.py's.

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"swarmscope.dev/relayd/pb"
)

const svc = "/swarmscope.v1.ProbeControl/"

var serviceDesc = grpc.ServiceDesc{
	ServiceName: "swarmscope.v1.ProbeControl",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Hello", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := &pb.HelloRequest{}
			if err := dec(in); err != nil {
				return nil, err
			}
			return srv.(*fleet).hello(in)
		}},
		{MethodName: "Register", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := &pb.RegisterRequest{}
			if err := dec(in); err != nil {
				return nil, err
			}
			return srv.(*fleet).register(in)
		}},
	},
	Streams: []grpc.StreamDesc{{
		StreamName: "Session", ServerStreams: true, ClientStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error { return srv.(*fleet).session(stream) },
	}},
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return b
}

func mac(token string, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, []byte(token))
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

func (f *fleet) hello(in *pb.HelloRequest) (*pb.HelloReply, error) {
	if len(in.GetProbeNonce()) < 16 {
		return nil, status.Error(codes.InvalidArgument, "probe_nonce must be at least 16 bytes")
	}
	sn := randomBytes(16)
	now := time.Now()
	f.mu.Lock()
	// Hello is unauthenticated: its one-time nonces are bounded in number and lifetime.
	for len(f.helloQ) > 0 {
		h, ok := f.hellos[f.helloQ[0]]
		if ok && len(f.hellos) < maxPendingHellos && now.Sub(h.t) <= helloTTL {
			break
		}
		delete(f.hellos, f.helloQ[0])
		f.helloQ = f.helloQ[1:]
	}
	key := string(sn)
	f.hellos[key] = hello{nonce: append([]byte(nil), in.GetProbeNonce()...), t: now}
	f.helloQ = append(f.helloQ, key)
	f.mu.Unlock()
	proof := mac(f.c.token, []byte("swarmscope/v1 controller"), in.GetProbeNonce(), sn)
	return &pb.HelloReply{ServerNonce: sn, Proof: proof}, nil
}

func (f *fleet) register(in *pb.RegisterRequest) (*pb.RegisterReply, error) {
	f.mu.Lock()
	h, ok := f.hellos[string(in.GetServerNonce())]
	delete(f.hellos, string(in.GetServerNonce())) // one use only
	f.mu.Unlock()
	want := mac(f.c.token, []byte("swarmscope/v1 probe"), in.GetServerNonce(), in.GetNonce(), []byte(in.GetProbeId()))
	if !ok || time.Since(h.t) > helloTTL || !hmac.Equal(h.nonce, in.GetNonce()) || !hmac.Equal(want, in.GetProof()) {
		return nil, status.Error(codes.Unauthenticated, "bad proof, or a server nonce not fresh from Hello")
	}
	if in.GetRelay() {
		return nil, status.Error(codes.FailedPrecondition, "the native relay takes probes only: register this relay upstream of it")
	}
	sid := hex.EncodeToString(randomBytes(16))
	host := in.GetNodeName()
	if host == "" {
		host = in.GetHostname()
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.probes) // the sessions heartbeating here, this one included
	if f.probes[in.GetProbeId()] == nil {
		n++
	}
	interval, liveness := pace(f.c.heartbeatS, f.c.livenessS, n, f.c.budget)
	p := &probe{id: in.GetProbeId(), host: host, sid: sid, lastSeen: now, liveness: liveness, out: newOutbox()}
	if old := f.probes[p.id]; old != nil {
		old.out.put(nil) // a probe that re-registers replaces its old session; its windows stay
	}
	f.probes[p.id] = p
	f.sessions[sid] = p
	f.pruneGone(now)
	f.notify()
	return &pb.RegisterReply{SessionId: sid, HeartbeatIntervalS: interval}, nil
}

func (f *fleet) session(stream grpc.ServerStream) error {
	first := &pb.ProbeMessage{}
	if err := stream.RecvMsg(first); err != nil {
		return nil
	}
	f.mu.Lock()
	p := f.sessions[first.GetSessionId()]
	if p != nil && f.probes[p.id] != p {
		p = nil // a replaced session cannot be resumed
	}
	if p == nil {
		f.mu.Unlock()
		return status.Error(codes.Unauthenticated, "unknown session: call Hello and Register first")
	}
	p.connected = true
	p.lastSeen = time.Now()
	f.resend(p)
	f.watch(p, true)
	f.notify()
	f.mu.Unlock()
	defer f.ended(p)
	f.handle(p, first)
	go func() {
		for {
			m := &pb.ProbeMessage{}
			if err := stream.RecvMsg(m); err != nil {
				f.ended(p) // the probe hung up: end the writer too
				p.out.put(nil)
				return
			}
			f.handle(p, m)
		}
	}()
	ctx := stream.Context()
	for {
		for _, c := range p.out.take() {
			if c == nil {
				return nil // after a Shutdown too
			}
			if err := stream.SendMsg(c); err != nil {
				return err
			}
		}
		select {
		case <-p.out.signal:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
