package hostinfo

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
)

// AccelCache is the acceleration verdict remembered for one boot, so that
// starting a VM never pays for the KVM probe. `virt host check` refreshes it.
type AccelCache struct {
	BootID       string    `json:"bootID"`
	Acceleration string    `json:"acceleration"`
	Reason       string    `json:"reason"`
	CheckedAt    time.Time `json:"checkedAt"`
}

// SaveAccelCache writes the verdict atomically.
func SaveAccelCache(path string, c AccelCache) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o644)
}

// LoadAccelCache returns the cached verdict if it was made in this boot.
func LoadAccelCache(path, bootID string) (AccelCache, error) {
	var c AccelCache
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("acceleration cache %s: %w", path, err)
	}
	if bootID == "" || c.BootID != bootID {
		return c, fmt.Errorf("acceleration cache %s: made in boot %q, this is boot %q", path, c.BootID, bootID)
	}
	return c, nil
}
