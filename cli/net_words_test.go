package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/virtcon/virtcon/netcfg"
)

// The CLI words netcfg's typed errors as the core's messages used to:
// the text names the CLI's flags and commands, and the typed error stays
// in the chain (so the exit code is the same).
func TestWordNet(t *testing.T) {
	deadline := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	at := deadline.Local().Format(time.RFC3339)
	port := &netcfg.FieldError{Field: "bridges[0].ports[0]", Value: "eth0", Kind: netcfg.ErrPortCarriesDefaultRoute,
		Msg: `carries the host's default route; enslaving it to "br0" could cut the host off`}
	route := &netcfg.FieldError{Field: "management.gateway", Value: "192.0.2.1", Kind: netcfg.ErrChangesDefaultRoute,
		Msg: "would replace the host's default route (default via 192.0.2.9 dev eth0)"}
	plain := &netcfg.FieldError{Field: "hostname", Value: "-bad-", Kind: netcfg.ErrInvalid, Msg: "must be a host name"}
	tests := []struct {
		name string
		err  error
		want string
		as   any
	}{
		{"deadline, STP", fmt.Errorf("try: %w", &netcfg.DeadlineTooShortError{Got: 10 * time.Second, Min: 35 * time.Second, STP: 30 * time.Second, Margin: 5 * time.Second}),
			"try: try deadline too short: --try 10s is shorter than 35s: STP on the bridges involved takes 30s (2 × forward delay) before ports forward, plus 5s to apply and verify; use --try 35s or longer",
			new(*netcfg.DeadlineTooShortError)},
		{"deadline", &netcfg.DeadlineTooShortError{Got: time.Second, Min: 5 * time.Second, Margin: 5 * time.Second},
			"try deadline too short: --try 1s is shorter than the 5s needed to apply and verify; use --try 5s or longer",
			new(*netcfg.DeadlineTooShortError)},
		{"overrun", fmt.Errorf("try: %w; the previous state is restored", &netcfg.TryOverrunError{Deadline: deadline}),
			"try: apply and verify took until the deadline " + at + "; use a longer --try; the previous state is restored",
			new(*netcfg.TryOverrunError)},
		{"rollback failed", fmt.Errorf("confirm: %w", &netcfg.NotConfirmableError{ID: "0123456789abcdef", Deadline: deadline, RollbackError: "restore: boom"}),
			"confirm: the network try can no longer be kept: rolling back try 0123456789abcdef failed (restore: boom), so the network may be half restored; run `virt net rollback` to retry the rollback",
			new(*netcfg.NotConfirmableError)},
		{"deadline passed", fmt.Errorf("confirm: %w", &netcfg.NotConfirmableError{ID: "0123456789abcdef", Deadline: deadline}),
			"confirm: the network try can no longer be kept: the deadline " + at + " of try 0123456789abcdef has passed and the watchdog rolls it back; if it stays pending, run `virt net rollback` to retry the rollback",
			new(*netcfg.NotConfirmableError)},
		{"tried file missing", fmt.Errorf("confirm: %w", &netcfg.TriedFileError{ID: "0123456789abcdef", Path: "/n.yaml.pending", Desired: "/n.yaml", Missing: true}),
			"confirm: the tried file /n.yaml.pending of try 0123456789abcdef is missing, so /n.yaml would not describe the network: nothing confirmed; run `virt net rollback` and try again",
			new(*netcfg.TriedFileError)},
		{"tried file not the try's", fmt.Errorf("confirm: %w", &netcfg.TriedFileError{ID: "0123456789abcdef", Path: "/n.yaml.pending", Desired: "/n.yaml"}),
			"confirm: /n.yaml.pending is not the file try 0123456789abcdef applied (changed since, or left by another try): nothing confirmed; run `virt net rollback` and try again",
			new(*netcfg.TriedFileError)},
		{"unkeepable", &netcfg.UnkeepableTryError{Path: "/n.yaml.pending", Err: fs.ErrPermission},
			"try started, but recording /n.yaml.pending failed, so it cannot be kept (it rolls back at the deadline, or now with `virt net rollback`): permission denied",
			new(*netcfg.UnkeepableTryError)},
		{"default-route rule", fmt.Errorf("the apply would be refused: %w", &netcfg.ValidationError{Kind: netcfg.ErrInvalid, Errs: []*netcfg.FieldError{plain, port, route}}),
			`the apply would be refused: invalid network configuration: hostname: must be a host name (got "-bad-"); ` +
				`bridges[0].ports[0]: carries the host's default route; enslaving it to "br0" could cut the host off: apply with --try, which rolls back unless confirmed (got "eth0"); ` +
				`management.gateway: would replace the host's default route (default via 192.0.2.9 dev eth0); apply with --try, which rolls back unless confirmed (got "192.0.2.1")`,
			new(*netcfg.ValidationError)},
		{"other field errors", &netcfg.ValidationError{Kind: netcfg.ErrInvalid, Errs: []*netcfg.FieldError{plain}},
			`invalid network configuration: hostname: must be a host name (got "-bad-")`, new(*netcfg.ValidationError)},
	}
	for _, tc := range tests {
		got := wordNet(tc.err)
		if got.Error() != tc.want {
			t.Errorf("%s: wordNet = %q;\nwant %q", tc.name, got, tc.want)
		}
		if !errors.As(got, tc.as) {
			t.Errorf("%s: the worded error lost its %T", tc.name, tc.as)
		}
		if ExitCode(got) != ExitCode(tc.err) {
			t.Errorf("%s: exit %d worded; want %d, as before", tc.name, ExitCode(got), ExitCode(tc.err))
		}
	}
	if wordNet(nil) != nil {
		t.Error("wordNet(nil) != nil")
	}
	other := errors.New("boom")
	if wordNet(other) != other {
		t.Error("wordNet changed an error it has no words for")
	}
}
