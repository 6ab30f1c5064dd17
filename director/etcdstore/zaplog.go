package etcdstore

import (
	"context"
	"log/slog"
	"sort"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// noise are messages etcd logs above DEBUG during a normal start or Close
// (measured on v3.7.3): the listeners and the gRPC server shutting down
// report "closed" errors that mean nothing went wrong, and two start-up
// warnings are about features this member does not use (auth tokens, a
// separate HTTP port). They are demoted to DEBUG, not dropped.
var noise = []string{
	"mux: server closed",
	"http: Server closed",
	"use of closed network connection",
	"grpc: the server has been stopped",
	"simple token is not cryptographically signed",
	"Running http and grpc server on single port",
}

// zapLogger returns a zap logger whose entries go to l: etcd's DEBUG is
// dropped (raft and apply traces that print the values written, secrets
// included), INFO becomes slog DEBUG (etcd narrating its own start and
// stop), WARN stays WARN (etcd's slow-request warnings print value sizes,
// not values), ERROR and above become ERROR; the close noise is DEBUG.
func zapLogger(l *slog.Logger) *zap.Logger {
	return zap.New(&slogCore{l: l})
}

type slogCore struct {
	l     *slog.Logger
	attrs []slog.Attr
}

// dropped marks an entry that is never forwarded.
const dropped = slog.Level(-1000)

func slogLevel(e zapcore.Entry, fields []zapcore.Field) slog.Level {
	var lvl slog.Level
	switch {
	case e.Level < zapcore.InfoLevel:
		return dropped
	case e.Level == zapcore.InfoLevel:
		return slog.LevelDebug
	case e.Level == zapcore.WarnLevel:
		lvl = slog.LevelWarn
	default:
		lvl = slog.LevelError
	}
	if isNoise(e.Message) {
		return slog.LevelDebug
	}
	for _, f := range fields {
		if f.Type == zapcore.ErrorType {
			if err, ok := f.Interface.(error); ok && err != nil && isNoise(err.Error()) {
				return slog.LevelDebug
			}
		}
	}
	return lvl
}

func isNoise(s string) bool {
	for _, n := range noise {
		if strings.Contains(s, n) {
			return true
		}
	}
	return false
}

func (c *slogCore) Enabled(lvl zapcore.Level) bool {
	// The final level depends on the message (noise is demoted), so the
	// decision is taken in Check; here only etcd's DEBUG is refused.
	return lvl >= zapcore.InfoLevel
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	attrs := append(append([]slog.Attr(nil), c.attrs...), toAttrs(fields)...)
	return &slogCore{l: c.l, attrs: attrs}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	// Fields are not known yet here; Write re-checks with them.
	if lvl := slogLevel(e, nil); lvl != dropped && c.l.Enabled(context.Background(), lvl) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	lvl := slogLevel(e, fields)
	ctx := context.Background()
	if lvl == dropped || !c.l.Enabled(ctx, lvl) {
		return nil
	}
	r := slog.NewRecord(e.Time, lvl, e.Message, 0)
	r.AddAttrs(c.attrs...)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	r.AddAttrs(toAttrs(fields)...)
	return c.l.Handler().Handle(ctx, r)
}

func (c *slogCore) Sync() error { return nil }

func toAttrs(fields []zapcore.Field) []slog.Attr {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	return attrs
}
