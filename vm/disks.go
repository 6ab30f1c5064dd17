package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func (m *Manager) diskPath(uid, name string) string {
	return filepath.Join(m.layout().VMStateDir(uid), "disk-"+name+".qcow2")
}

// createDisks makes the qcow2 file of each disk: an overlay backed by its
// base image, or a blank disk. Files already made are removed again if a
// later one fails.
func (m *Manager) createDisks(ctx context.Context, vm *VirtualMachine, disks []Disk) (err error) {
	var made []string
	defer func() {
		if err != nil {
			for _, p := range made {
				os.Remove(p)
			}
		}
	}()
	img, err := m.qemuImg()
	if err != nil && len(disks) > 0 {
		return err
	}
	for i, d := range disks {
		path := m.diskPath(vm.Metadata.UID, d.Name)
		args := []string{"create", "-q", "-f", "qcow2"}
		if d.Image != "" {
			base, err := m.image(d.Image)
			if err != nil {
				return fmt.Errorf("spec.disks[%d].image: %w", i, err)
			}
			args = append(args, "-F", base.Format, "-b", base.Path)
		}
		args = append(args, path)
		if d.Size != "" {
			n, _ := ParseSize(d.Size)
			args = append(args, strconv.FormatInt(n, 10))
		}
		if err := runTool(ctx, img, args...); err != nil {
			os.Remove(path)
			return fmt.Errorf("disk %q: %w", d.Name, err)
		}
		made = append(made, path)
		if err := os.Chmod(path, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func runTool(ctx context.Context, bin string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", filepath.Base(bin), args[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}

// imgInfo is the part of `qemu-img info --output=json` we need.
type imgInfo struct {
	Format          string `json:"format"`
	VirtualSize     int64  `json:"virtual-size"`
	BackingFilename string `json:"backing-filename"`
	FormatSpecific  struct {
		Data struct {
			DataFile string `json:"data-file"`
		} `json:"data"`
	} `json:"format-specific"`
}

// inspectImage reads an image's format and refuses images that reference
// other files: a base with a backing file or an external data file could
// make a VM read any file on the host.
func (m *Manager) inspectImage(ctx context.Context, path string) (imgInfo, error) {
	var info imgInfo
	bin, err := m.qemuImg()
	if err != nil {
		return info, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "info", "--output=json", path).Output()
	if err != nil {
		return info, fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return info, fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	if info.BackingFilename != "" {
		return info, fmt.Errorf("image %s has a backing file (%s): refused, import a flattened image (qemu-img convert)", path, info.BackingFilename)
	}
	if info.FormatSpecific.Data.DataFile != "" {
		return info, fmt.Errorf("image %s has an external data file (%s): refused", path, info.FormatSpecific.Data.DataFile)
	}
	if info.Format != "qcow2" && info.Format != "raw" {
		return info, fmt.Errorf("image %s: format %q not supported (qcow2 or raw)", path, info.Format)
	}
	return info, nil
}

// serialLogCap bounds a serial log: it is trimmed to its last half when a
// VM starts or its log is read (QEMU appends to it with O_APPEND, so
// truncating under it is safe).
const serialLogCap = 4 << 20

func capLog(path string, limit int64) {
	st, err := os.Stat(path)
	if err != nil || st.Size() <= limit {
		return
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer f.Close()
	keep := limit / 2
	buf := make([]byte, keep)
	n, _ := f.ReadAt(buf, st.Size()-keep)
	old := path + ".1"
	if err := os.WriteFile(old, buf[:n], 0o600); err != nil {
		return
	}
	_ = f.Truncate(0)
	_, _ = f.Seek(0, io.SeekStart)
}
