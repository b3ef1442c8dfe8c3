// Package k6out is swarmscope's k6 output: one short line per http_req_duration sample (and one
// per dropped_iterations sample), the only samples workers/k6.py reads, written in the
// background at k6's usual one-second flush.
//
//	k6 run --out swarmscope=points.txt script.js   # a k6 built by tools/build_k6.sh --swarmscope
//
// Why: k6's CSV output writes all ~13 samples of every request (http_reqs, the 7 phase timings,
// iterations, data_sent, ...) and cannot be told to write one metric (grafana/k6#1321); that
// cost k6 about a fifth of its CPU per request. This output skips everything else before
// formatting, and formats a sample's tags once per tag set (k6 interns tag sets, so a step's
// samples share one), not once per sample.
//
// Format (version 1), after one header line "# swarmscope-k6out 1 kind,time_us,value,scenario,status,error_code":
//
//	r,<end unix µs>,<duration ns>,<scenario>,<status>,<error_code>   an http_req_duration sample
//	d,<unix µs>,<count>,<scenario>,,                                    a dropped_iterations sample
//
// Caveats: tag values lose any ',' and newline (replaced by '_'); the tags not given with
// --system-tags are empty fields. A write error is logged and returned by Stop (k6 then says so).
package k6out

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.k6.io/k6/metrics"
	"go.k6.io/k6/output"
)

// Header is the file's first line: the format's name and version, and its columns.
const Header = "# swarmscope-k6out 1 kind,time_us,value,scenario,status,error_code\n"

// flushPeriod is the CSV output's default save interval: the same latency to disk as before.
const flushPeriod = time.Second

func init() {
	output.RegisterExtension("swarmscope", New)
}

// Output writes the samples swarmscope reads; see the package comment.
type Output struct {
	output.SampleBuffer

	path    string
	file    io.WriteCloser
	flusher *output.PeriodicFlusher
	logger  interface{ Errorf(string, ...any) }

	duration, dropped *metrics.Metric // k6's built-in metrics (matched by pointer, not by name)

	// Only the flusher's goroutine touches these.
	tags map[*metrics.TagSet][]byte // ",scenario,status,error_code\n" of a tag set
	buf  []byte
	mu   sync.Mutex // guards err (Stop reads it after the last flush)
	err  error
}

var _ output.WithBuiltinMetrics = (*Output)(nil)

// New is the output's constructor; the config argument (after "swarmscope=") is the file's path.
func New(p output.Params) (output.Output, error) {
	if p.ConfigArgument == "" {
		return nil, fmt.Errorf("swarmscope output: give a file, --out swarmscope=points.txt")
	}
	f, err := p.FS.Create(p.ConfigArgument)
	if err != nil {
		return nil, fmt.Errorf("swarmscope output: %w", err)
	}
	return &Output{
		path: p.ConfigArgument, file: f, logger: p.Logger,
		tags: make(map[*metrics.TagSet][]byte), buf: make([]byte, 0, 64<<10),
	}, nil
}

// SetBuiltinMetrics gives the metric objects the samples point to.
func (o *Output) SetBuiltinMetrics(m *metrics.BuiltinMetrics) {
	o.duration, o.dropped = m.HTTPReqDuration, m.DroppedIterations
}

// Description is shown by `k6 run`.
func (o *Output) Description() string { return "swarmscope (" + o.path + ")" }

// Start writes the header and starts the periodic flush.
func (o *Output) Start() error {
	if o.duration == nil {
		return fmt.Errorf("swarmscope output: k6 gave no built-in metrics")
	}
	if _, err := io.WriteString(o.file, Header); err != nil {
		return fmt.Errorf("swarmscope output: %w", err)
	}
	pf, err := output.NewPeriodicFlusher(flushPeriod, o.flush)
	if err != nil {
		return err
	}
	o.flusher = pf
	return nil
}

// Stop flushes what is buffered, closes the file and returns the first write error.
func (o *Output) Stop() error {
	o.flusher.Stop()
	cerr := o.file.Close()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return o.err
	}
	return cerr
}

func (o *Output) flush() {
	b := o.buf[:0]
	for _, sc := range o.GetBufferedSamples() {
		for _, s := range sc.GetSamples() {
			var kind byte
			var v int64
			switch s.Metric {
			case o.duration:
				kind, v = 'r', int64(math.Round(s.Value*1e6)) // ms (metrics.D) -> ns
			case o.dropped:
				kind, v = 'd', int64(math.Round(s.Value))
			default:
				continue
			}
			b = append(b, kind, ',')
			b = strconv.AppendInt(b, s.Time.UnixMicro(), 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, v, 10)
			b = append(b, o.suffix(s.Tags)...)
		}
	}
	o.buf = b[:0]
	if len(b) == 0 {
		return
	}
	if _, err := o.file.Write(b); err != nil {
		o.mu.Lock()
		if o.err == nil {
			o.err = fmt.Errorf("swarmscope output %s: %w", o.path, err)
			o.logger.Errorf("%v", o.err)
		}
		o.mu.Unlock()
	}
}

// suffix is a tag set's ",scenario,status,error_code\n", built once per tag set.
func (o *Output) suffix(ts *metrics.TagSet) []byte {
	if s, ok := o.tags[ts]; ok {
		return s
	}
	var sb strings.Builder
	for _, name := range [...]string{"scenario", "status", "error_code"} {
		v, _ := ts.Get(name)
		sb.WriteByte(',')
		sb.WriteString(clean.Replace(v))
	}
	sb.WriteByte('\n')
	s := []byte(sb.String())
	o.tags[ts] = s
	return s
}

var clean = strings.NewReplacer(",", "_", "\n", "_", "\r", "_")
