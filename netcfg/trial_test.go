package netcfg

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/virtcon/virtcon/paths"
)

// ConfirmDesiredTry and RollbackDesiredTry act on the caller's try only:
// another try's record is left as it is, and its file is not promoted.
func TestDesiredTryOnlyOurs(t *testing.T) {
	ctx := context.Background()
	const id = "0123456789abcdef"
	tests := []struct {
		name    string
		pending bool
		call    func(layout paths.Layout) error
		want    error
		kept    bool // the try was confirmed
	}{
		{"confirm another's", true, func(l paths.Layout) error { return ConfirmDesiredTry(ctx, l, "fedcba9876543210") }, ErrNotOurTry, false},
		{"confirm without id", true, func(l paths.Layout) error { return ConfirmDesiredTry(ctx, l, "") }, ErrNotOurTry, false},
		{"rollback another's", true, func(l paths.Layout) error { return RollbackDesiredTry(ctx, l, "fedcba9876543210") }, ErrNotOurTry, false},
		{"confirm ours, none pending", false, func(l paths.Layout) error { return ConfirmDesiredTry(ctx, l, id) }, ErrNoPendingTry, false},
		{"rollback ours, none pending", false, func(l paths.Layout) error { return RollbackDesiredTry(ctx, l, id) }, ErrNoPendingTry, false},
		{"confirm ours", true, func(l paths.Layout) error { return ConfirmDesiredTry(ctx, l, id) }, nil, true},
	}
	const data = "apiVersion: virtcon/v1\nkind: HostNetwork\n"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			layout := paths.New(t.TempDir())
			now := time.Now()
			if tt.pending {
				// an empty snapshot: should a rollback happen by mistake,
				// it restores nothing on the machine running the test
				if err := tryWrite(PendingPath(layout), &Pending{ID: id, Started: now, Deadline: now.Add(time.Minute), Snapshot: &Snapshot{Taken: now},
					DesiredSHA256: desiredSum([]byte(data))}); err != nil {
					t.Fatal(err)
				}
				writeTestFile(t, DesiredPendingFile(layout), data)
			}
			err := tt.call(layout)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("got %v; want %v", err, tt.want)
			}
			_, perr := PendingTry(layout)
			_, derr := os.Stat(DesiredFile(layout))
			switch {
			case tt.kept && (perr == nil || derr != nil):
				t.Errorf("confirmed: pending record %v, desired file %v; want gone, there", perr, derr)
			case !tt.kept && tt.pending && (perr != nil || derr == nil):
				t.Errorf("refused: pending record %v, desired file %v; want kept, absent", perr, derr)
			}
		})
	}
}
