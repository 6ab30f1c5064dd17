package hostinfo

import (
	"fmt"
	"strings"

	"github.com/jaypipes/ghw"
)

func (c *collector) block(inv *Inventory) {
	inv.Block = []BlockDev{}
	info, err := ghw.Block(c.ghwArgs()...)
	if err != nil {
		c.unknown("block", fmt.Errorf("ghw: %w", err))
		return
	}
	for _, d := range info.Disks {
		if strings.HasPrefix(d.Name, "loop") || strings.HasPrefix(d.Name, "ram") {
			continue
		}
		inv.Block = append(inv.Block, BlockDev{
			Name:       d.Name,
			SizeBytes:  d.SizeBytes,
			Type:       strings.ToLower(d.DriveType.String()),
			Controller: strings.ToLower(d.StorageController.String()),
			Vendor:     unknownToEmpty(d.Vendor),
			Model:      unknownToEmpty(d.Model),
			Removable:  d.IsRemovable,
		})
	}
}
