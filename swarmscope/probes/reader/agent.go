package main

// The fleet client: the same protocol and rules as probes/agent.py (its module docstring is
// the reference). Register with the mutual challenge, then one Session stream served by this
// goroutine; a sender goroutine owns SendMsg; heartbeats every interval. Retries are bounded
// with jittered backoff (backoff.go); UNAUTHENTICATED / PERMISSION_DENIED / UNIMPLEMENTED and a wrong
// controller proof are fatal at once.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"swarmscope.dev/probereader/pb"
)

const (
	svc             = "/swarmscope.v1.ProbeControl/"
	rpcTimeout      = 5 * time.Second
	maxOpenWindows  = 256
	maxClosedWindow = 64
)

type sessionLost struct{ msg string }

func (e *sessionLost) Error() string { return e.msg }

type agent struct {
	c       *config
	progs   map[string]program
	order   []string // program names, as loaded
	windows *windows
	otlp    *otlpExporter
	cpu     cpuMeter
	up      int          // index into c.upstreams of the upstream dialled now
	openN   atomic.Int32 // open windows (the failback watcher reads it from its goroutine)
	moved   atomic.Bool  // the session ended to go back to upstreams[0] (failback.go)
}

// upstream: the relay or controller this probe dials now.
func (a *agent) upstream() string { return a.c.upstreams[a.up%len(a.c.upstreams)] }

func newAgent(c *config, progs map[string]program) *agent {
	a := &agent{c: c, progs: progs, otlp: newOTLPExporter()}
	for _, pin := range c.pins {
		a.order = append(a.order, pin[0])
	}
	a.windows = newWindows(a)
	a.cpu.sample()
	return a
}

func (a *agent) runForever(ctx context.Context) error {
	failures := 0
	last := ""
	waits := &backoff{base: 0.5, cap: 8, upstreams: len(a.c.upstreams), last: 0.5}
	for ctx.Err() == nil {
		started := time.Now()
		done, err := a.once(ctx)
		if done {
			return nil
		}
		var lost *sessionLost
		switch {
		case err == nil:
			last = "the controller ended the session"
		case errors.As(err, &lost):
			last = lost.msg
		default:
			return err // fatal
		}
		if ctx.Err() != nil {
			return nil
		}
		if a.moved.Swap(false) { // not a failure: home answers again
			fmt.Fprintf(os.Stderr, "probe: %s answers again: moving back to it\n", a.c.upstreams[0])
			a.up, failures = 0, 0
			waits.reset()
			continue
		}
		if time.Since(started) > max(5*time.Second, 3*a.c.heartbeat) {
			failures = 0 // a session that ran a while was healthy
			waits.reset()
		}
		failures++
		n := len(a.c.upstreams)
		if failures > a.c.retries*n {
			return fmt.Errorf("controller %s unreachable: gave up after %d retries (last: %s)", a.c.controller, a.c.retries, last)
		}
		// The next upstream after a short spread; a longer (jittered) wait after a whole round.
		a.up++
		delay := waits.next(failures)
		fmt.Fprintf(os.Stderr, "probe: %s; retry %d/%d at %s in %.1fs\n", last, failures, a.c.retries*n, a.upstream(), delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Duration(delay * float64(time.Second))):
		}
	}
	return nil
}

func (a *agent) creds() (grpc.DialOption, error) {
	if a.c.tlsCA == "" && a.c.tlsCert == "" {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	cfg := &tls.Config{ServerName: a.c.tlsServerName, MinVersion: tls.VersionTLS12}
	if a.c.tlsCA != "" {
		pem, err := os.ReadFile(a.c.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("cannot read TLS CA %s: %w", a.c.tlsCA, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA %s holds no PEM certificate", a.c.tlsCA)
		}
	}
	if a.c.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(a.c.tlsCert, a.c.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("cannot read TLS client certificate %s / key %s: %w", a.c.tlsCert, a.c.tlsKey, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}

// once: one connection, registration and session. (true, nil) = shut down or stopped.
func (a *agent) once(ctx context.Context) (bool, error) {
	opt, err := a.creds()
	if err != nil {
		return false, err
	}
	conn, err := grpc.NewClient("passthrough:///"+a.upstream(), opt)
	if err != nil {
		return false, &sessionLost{err.Error()}
	}
	defer conn.Close()
	sid, interval, err := a.register(ctx, conn)
	if err != nil {
		return false, err
	}
	return a.session(ctx, conn, sid, interval)
}

func (a *agent) rpcFailed(what string, err error) error {
	st, _ := status.FromError(err)
	msg := fmt.Sprintf("%s at %s failed: %s: %s", what, a.upstream(), codeName(st.Code()), st.Message())
	switch st.Code() {
	case codes.Unauthenticated, codes.PermissionDenied, codes.Unimplemented:
		return errors.New(msg + " (check the token / that this is a swarmscope controller)")
	}
	return &sessionLost{msg}
}

func codeName(c codes.Code) string {
	// Python's grpc.StatusCode names, so messages read the same from both probes.
	names := map[codes.Code]string{codes.Unavailable: "UNAVAILABLE", codes.Unauthenticated: "UNAUTHENTICATED",
		codes.PermissionDenied: "PERMISSION_DENIED", codes.Unimplemented: "UNIMPLEMENTED",
		codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.Canceled: "CANCELLED"}
	if n, ok := names[c]; ok {
		return n
	}
	return c.String()
}

func mac(token string, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, []byte(token))
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

func (a *agent) register(ctx context.Context, conn *grpc.ClientConn) (string, time.Duration, error) {
	nonce := randomBytes(16)
	hello := &pb.HelloReply{}
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	if err := conn.Invoke(cctx, svc+"Hello", &pb.HelloRequest{ProbeNonce: nonce, ProbeId: a.c.probeID}, hello); err != nil {
		return "", 0, a.rpcFailed("Hello", err)
	}
	// The controller proves itself first: an impostor gets nothing keyed by the token.
	want := mac(a.c.token, []byte("swarmscope/v1 controller"), nonce, hello.GetServerNonce())
	if !hmac.Equal(want, hello.GetProof()) {
		return "", 0, fmt.Errorf("controller %s failed to prove it holds the token (wrong HMAC proof: an "+
			"impostor, or this probe's token is not the controller's): refusing its commands, sending it nothing more", a.upstream())
	}
	host, _ := os.Hostname()
	release := kernelRelease()
	req := &pb.RegisterRequest{
		ProbeId: a.c.probeID, Hostname: host, NodeName: a.c.node, KernelRelease: release,
		Programs: a.order, Nonce: nonce, Version: a.c.version, ServerNonce: hello.GetServerNonce(),
		Proof: mac(a.c.token, []byte("swarmscope/v1 probe"), hello.GetServerNonce(), nonce, []byte(a.c.probeID)),
	}
	reply := &pb.RegisterReply{}
	rctx, rcancel := context.WithTimeout(ctx, rpcTimeout)
	defer rcancel()
	if err := conn.Invoke(rctx, svc+"Register", req, reply); err != nil {
		return "", 0, a.rpcFailed("Register", err)
	}
	if reply.GetSessionId() == "" {
		return "", 0, &sessionLost{"Register returned no session_id"}
	}
	interval := a.c.heartbeat
	if reply.GetHeartbeatIntervalS() > 0 {
		interval = time.Duration(reply.GetHeartbeatIntervalS() * float64(time.Second))
	}
	return reply.GetSessionId(), interval, nil
}

func (a *agent) heartbeat() *pb.Heartbeat {
	pct, rss := a.cpu.sample()
	return &pb.Heartbeat{UnixNs: uint64(time.Now().UnixNano()), CpuPercent: pct, RssBytes: rss}
}

// session serves one Session stream; (true, nil) when told to shut down or stopped.
func (a *agent) session(ctx context.Context, conn *grpc.ClientConn, sid string, interval time.Duration) (bool, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := conn.NewStream(sctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, svc+"Session")
	if err != nil {
		return false, a.rpcFailed("Session", err)
	}
	out := make(chan *pb.ProbeMessage, 256)
	ended := make(chan struct{})
	defer close(ended)
	put := func(m *pb.ProbeMessage) {
		select {
		case out <- m:
		case <-sctx.Done():
		}
	}
	go func() { // the only SendMsg caller; nil = half-close
		for m := range out {
			if m == nil {
				_ = stream.CloseSend()
				return
			}
			if stream.SendMsg(m) != nil {
				return // the receive side sees the error
			}
		}
	}()
	if a.up%len(a.c.upstreams) != 0 { // away from home: watch for it
		go a.failback(sctx, ended, cancel)
	}
	// The first message carries the session_id (every one does); a heartbeat is its content.
	put(&pb.ProbeMessage{SessionId: sid, Kind: &pb.ProbeMessage_Heartbeat{Heartbeat: a.heartbeat()}})
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ended:
				return
			case <-sctx.Done():
				return
			case <-t.C:
				put(&pb.ProbeMessage{SessionId: sid, Kind: &pb.ProbeMessage_Heartbeat{Heartbeat: a.heartbeat()}})
			}
		}
	}()
	shutdown := false
	for {
		cmd := &pb.Command{}
		err := stream.RecvMsg(cmd)
		if err != nil {
			if shutdown || ctx.Err() != nil {
				return true, nil
			}
			if errors.Is(err, io.EOF) {
				return false, nil
			}
			return false, a.rpcFailed("Session", err)
		}
		switch k := cmd.GetKind().(type) {
		case *pb.Command_Open:
			put(&pb.ProbeMessage{SessionId: sid, Kind: &pb.ProbeMessage_Ack{Ack: a.windows.open(k.Open)}})
		case *pb.Command_Close:
			readings, trace := a.windows.close(k.Close)
			a.otlp.export(trace)
			done := &pb.WindowDone{RunId: k.Close.GetRunId(), WindowId: k.Close.GetWindowId(),
				Readings: uint32(len(readings)), Batch: readings, Trace: trace}
			put(&pb.ProbeMessage{SessionId: sid, Kind: &pb.ProbeMessage_Done{Done: done}})
		case *pb.Command_Shutdown:
			fmt.Fprintf(os.Stderr, "probe: controller asked to shut down: %s\n", k.Shutdown.GetReason())
			shutdown = true
			// Half-close so queued messages still go out; the controller then ends the
			// stream, or it is cut after 2 s.
			put(nil)
			time.AfterFunc(2*time.Second, cancel)
		default:
			fmt.Fprintf(os.Stderr, "probe: ignoring unknown command (seq %d)\n", cmd.GetSeq())
		}
	}
}
