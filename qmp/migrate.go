package qmp

import "context"

// Migration run states (query-migrate's status) that end a migration.
const (
	MigrationCompleted = "completed"
	MigrationFailed    = "failed"
	MigrationCancelled = "cancelled"
)

// MigrationInfo is the reply to query-migrate, the part virtcon reads.
type MigrationInfo struct {
	// Status: "none", "setup", "active", "completed", "failed",
	// "cancelling", "cancelled", ... ("" before any migration).
	Status string `json:"status"`
	// ErrorDesc says why a migration failed.
	ErrorDesc string `json:"error-desc,omitempty"`
	// TotalTime is the milliseconds a finished outgoing migration took.
	TotalTime int64         `json:"total-time,omitempty"`
	RAM       *MigrationRAM `json:"ram,omitempty"`
}

// MigrationRAM is query-migrate's RAM transfer counters (outgoing only).
type MigrationRAM struct {
	Transferred int64 `json:"transferred"`
	Total       int64 `json:"total"`
	Remaining   int64 `json:"remaining"`
	Duplicate   int64 `json:"duplicate"` // zero pages sent as a flag
	Normal      int64 `json:"normal"`    // pages sent whole
}

// Done reports whether the migration has ended, well or not.
func (i MigrationInfo) Done() bool {
	switch i.Status {
	case MigrationCompleted, MigrationFailed, MigrationCancelled:
		return true
	}
	return false
}

// QueryMigrate runs query-migrate.
func (m *Monitor) QueryMigrate(ctx context.Context) (MigrationInfo, error) {
	var i MigrationInfo
	err := m.Execute(ctx, "query-migrate", nil, &i)
	return i, err
}

// Migrate starts an outgoing migration to uri ("fd:NAME" for a descriptor
// given with SendFD). It returns once the migration is under way; poll
// QueryMigrate for its end.
func (m *Monitor) Migrate(ctx context.Context, uri string) error {
	return m.Execute(ctx, "migrate", map[string]string{"uri": uri}, nil)
}

// MigrateIncoming starts the incoming migration of a QEMU started with
// "-incoming defer", from uri.
func (m *Monitor) MigrateIncoming(ctx context.Context, uri string) error {
	return m.Execute(ctx, "migrate-incoming", map[string]string{"uri": uri}, nil)
}

// MigrateCancel cancels the outgoing migration.
func (m *Monitor) MigrateCancel(ctx context.Context) error {
	return m.Execute(ctx, "migrate_cancel", nil, nil)
}

// SetMigrationBandwidth sets the outgoing migration's bandwidth limit in
// bytes per second (QEMU's default is 32 MiB/s, made for live migration
// over a shared link, not for saving to a local file).
func (m *Monitor) SetMigrationBandwidth(ctx context.Context, bytesPerSecond int64) error {
	return m.Execute(ctx, "migrate-set-parameters", map[string]int64{"max-bandwidth": bytesPerSecond}, nil)
}
