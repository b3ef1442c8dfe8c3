package main

// One simulated probe: the handshake, a Session, windows; the same steps and bounds as
// bench/simprobes.py's _probe/_session (read those for the why of each).

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"swarmscope.dev/simprobes/pb"
)

const (
	svc         = "/swarmscope.v1.ProbeControl/"
	rpcTimeout  = 60 * time.Second
	rounds      = 10 // every upstream, ten rounds (a starved server can take a minute to join)
	keptAnswers = 8  // closes answered, kept to answer a close sent again the same
)

var counters = map[string]uint64{"exec": 1000} // simprobes.COUNTERS

// heartbeatMsg: every heartbeat after a session's first, alike for all (serialized once).
var heartbeatMsg = mustMarshal(&pb.ProbeMessage{Kind: &pb.ProbeMessage_Heartbeat{Heartbeat: &pb.Heartbeat{UnixNs: 1}}})

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// rawCodec: the Session stream writes bytes already serialized ([]byte) and reads Commands, as
// the Python probe's raw stream does (it parses each command, serializes each answer once).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return proto.Marshal(v.(proto.Message))
}
func (rawCodec) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }
func (rawCodec) Name() string                       { return "proto" }

var sessionDesc = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

type proofError struct{ upstream string }

func (e *proofError) Error() string { return "controller proof does not verify at " + e.upstream }

func mac(token string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, []byte(token))
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

func (h *host) register(ctx context.Context, conn *grpc.ClientConn, name string) (*pb.RegisterReply, error) {
	pid := "sim-" + name
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	hello := &pb.HelloReply{}
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	if err := conn.Invoke(cctx, svc+"Hello", &pb.HelloRequest{ProbeNonce: nonce, ProbeId: pid, Node: name}, hello); err != nil {
		return nil, err
	}
	// The node's key (swarmscope.core.auth.node_key): what the controller proves and checks.
	key := hex.EncodeToString(mac(h.token, []byte("swarmscope/v1 node "), []byte(name)))
	want := mac(key, []byte("swarmscope/v1 controller"), nonce, hello.GetServerNonce())
	if !hmac.Equal(want, hello.GetProof()) {
		return nil, &proofError{conn.Target()}
	}
	req := &pb.RegisterRequest{
		ProbeId: pid, Hostname: name, NodeName: name, Nonce: nonce, ServerNonce: hello.GetServerNonce(),
		Proof: mac(key, []byte("swarmscope/v1 probe"), hello.GetServerNonce(), nonce, []byte(pid)),
	}
	reply := &pb.RegisterReply{}
	rctx, rcancel := context.WithTimeout(ctx, rpcTimeout)
	defer rcancel()
	if err := conn.Invoke(rctx, svc+"Register", req, reply); err != nil {
		return nil, err
	}
	return reply, nil
}

// probeState outlives a session, as in the real agent: a close sent again through the next
// upstream gets the same readings.
type probeState struct {
	pid     string
	windows map[string][]*pb.NodeInfo // open windows: their nodes, as opened first
	answers map[string][]byte         // closes answered: the WindowDone sent
	order   []string                  // answers' keys, oldest first
	up      bool                      // counted in registered once, at its first session
}

// probe: conns are its upstreams in turn (a relay died: the next one).
func (h *host) probe(ctx context.Context, conns []*grpc.ClientConn, name string) {
	st := &probeState{pid: "sim-" + name, windows: map[string][]*pb.NodeInfo{}, answers: map[string][]byte{}}
	failures := 0
	last := len(conns)*rounds - 1
	for attempt := 0; attempt <= last; attempt++ {
		conn := conns[attempt%len(conns)]
		h.joining <- struct{}{}
		reply, err := h.register(ctx, conn, name)
		<-h.joining
		if err != nil {
			var bad *proofError
			if errors.As(err, &bad) {
				h.fail(fmt.Sprintf("%s: %v", name, err))
				return
			}
			s := status.Convert(err)
			failures++
			h.countError(codeName(s.Code()))
			if attempt == last {
				h.fail(fmt.Sprintf("%s: %s %s", name, codeName(s.Code()), s.Message()))
				return
			}
			// Jittered backoff: probes that failed together must not come back together.
			d := min(5.0, 1.0+float64(failures)) * (0.5 + mrand.Float64())
			time.Sleep(time.Duration(d * float64(time.Second)))
			continue
		}
		if h.session(ctx, conn, reply, st) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// codeName: Python's grpc.StatusCode names, so both simulators report errors alike.
func codeName(c codes.Code) string {
	names := map[codes.Code]string{codes.Unavailable: "UNAVAILABLE", codes.Unauthenticated: "UNAUTHENTICATED",
		codes.PermissionDenied: "PERMISSION_DENIED", codes.Unimplemented: "UNIMPLEMENTED",
		codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.Canceled: "CANCELLED",
		codes.ResourceExhausted: "RESOURCE_EXHAUSTED", codes.Internal: "INTERNAL", codes.Unknown: "UNKNOWN",
		codes.InvalidArgument: "INVALID_ARGUMENT", codes.FailedPrecondition: "FAILED_PRECONDITION"}
	if n, ok := names[c]; ok {
		return n
	}
	return c.String()
}

func (h *host) ack(runID, windowID string) []byte {
	key := runID + "\x00" + windowID
	if b, ok := h.acks.Load(key); ok {
		return b.([]byte)
	}
	b := mustMarshal(&pb.ProbeMessage{Kind: &pb.ProbeMessage_Ack{Ack: &pb.WindowAck{RunId: runID, WindowId: windowID, Ok: true}}})
	h.acks.Store(key, b) // a few windows a run: never large enough to need the Python's clearing
	return b
}

func (st *probeState) done(c *pb.CloseWindow) []byte {
	if b, ok := st.answers[c.GetWindowId()]; ok {
		return b
	}
	batch := st.readings(c.GetRunId(), c.GetWindowId())
	delete(st.windows, c.GetWindowId())
	done := &pb.WindowDone{RunId: c.GetRunId(), WindowId: c.GetWindowId(), Readings: uint32(len(batch)), Batch: batch}
	b := mustMarshal(&pb.ProbeMessage{Kind: &pb.ProbeMessage_Done{Done: done}})
	st.answers[c.GetWindowId()] = b
	st.order = append(st.order, c.GetWindowId())
	for len(st.order) > keptAnswers {
		delete(st.answers, st.order[0])
		st.order = st.order[1:]
	}
	return b
}

// readings: one per node of an open window, with the simulated counts.
func (st *probeState) readings(runID, windowID string) []*pb.Reading {
	nodes := st.windows[windowID]
	batch := make([]*pb.Reading, 0, len(nodes))
	for _, n := range nodes {
		batch = append(batch, &pb.Reading{RunId: runID, WindowId: windowID, ProbeId: st.pid,
			Node: n.GetName(), Counters: counters})
	}
	return batch
}

// soFar answers a ReadWindow (a read so far): the same counts, and the window stays open.
func (st *probeState) soFar(r *pb.ReadWindow) []byte {
	batch := st.readings(r.GetRunId(), r.GetWindowId())
	so := &pb.WindowDone{RunId: r.GetRunId(), WindowId: r.GetWindowId(), Readings: uint32(len(batch)),
		Batch: batch, ReadId: r.GetReadId()}
	return mustMarshal(&pb.ProbeMessage{Kind: &pb.ProbeMessage_SoFar{SoFar: so}})
}

// session serves one Session: true on Shutdown, false when the stream broke (the next upstream).
func (h *host) session(ctx context.Context, conn *grpc.ClientConn, reply *pb.RegisterReply, st *probeState) bool {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream and the heartbeats
	stream, err := conn.NewStream(sctx, sessionDesc, svc+"Session", grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return false
	}
	var writing sync.Mutex // one SendMsg at a time on a stream
	send := func(b []byte) error {
		writing.Lock()
		defer writing.Unlock()
		return stream.SendMsg(b)
	}
	first := &pb.ProbeMessage{SessionId: reply.GetSessionId(), Kind: &pb.ProbeMessage_Heartbeat{Heartbeat: &pb.Heartbeat{UnixNs: 1}}}
	if send(mustMarshal(first)) != nil {
		return false
	}
	interval := time.Second
	if reply.GetHeartbeatIntervalS() > 0 {
		interval = time.Duration(reply.GetHeartbeatIntervalS() * float64(time.Second))
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				if send(heartbeatMsg) != nil {
					return // the receive side sees the error
				}
			}
		}
	}()
	if !st.up {
		st.up = true
		h.registered.Add(1)
	}
	for {
		cmd := &pb.Command{}
		if stream.RecvMsg(cmd) != nil {
			return false // broken, or ended by the other side (EOF): the next upstream
		}
		switch k := cmd.GetKind().(type) {
		case *pb.Command_Open:
			o := k.Open
			if _, again := st.windows[o.GetWindowId()]; !again { // again: the same snapshot
				st.windows[o.GetWindowId()] = o.GetNodes()
			}
			if send(h.ack(o.GetRunId(), o.GetWindowId())) != nil {
				return false
			}
		case *pb.Command_Close:
			if send(st.done(k.Close)) != nil {
				return false
			}
		case *pb.Command_Read:
			if send(st.soFar(k.Read)) != nil {
				return false
			}
		case *pb.Command_Shutdown:
			return true
		}
	}
}
