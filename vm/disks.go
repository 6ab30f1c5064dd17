package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func (m *Manager) diskPath(uid, name string) string {
	return filepath.Join(m.layout().VMStateDir(uid), "disk-"+name+".qcow2")
}

// createDisks makes the qcow2 file of each disk: an overlay backed by its
// base image, or a blank disk. disks are vm's own (create) or the ones
// appended to its stored list (apply): errors name each by its index in
// the spec it joins. Every disk is checked before any file is made; files
// already made are removed again if a later one fails.
func (m *Manager) createDisks(ctx context.Context, vm *VirtualMachine, disks []Disk) (err error) {
	if len(disks) == 0 {
		return nil
	}
	first := len(vm.Spec.Disks)
	for _, d := range vm.Spec.Disks {
		if d.Name == disks[0].Name {
			first = 0
		}
	}
	img, err := m.qemuImg()
	if err != nil {
		return err
	}
	bases := make([]*Image, len(disks))
	var bad []*FieldError
	for i, d := range disks {
		if d.Image == "" {
			continue
		}
		base, err := m.image(d.Image)
		if err != nil {
			return fmt.Errorf("spec.disks[%d].image: %w", first+i, err)
		}
		bases[i] = base
		if d.Size == "" {
			continue // the overlay takes the base's size
		}
		vsize, err := m.virtualSize(ctx, base)
		if err != nil {
			return fmt.Errorf("spec.disks[%d].image: %w", first+i, err)
		}
		if n, _ := ParseSize(d.Size); n < vsize {
			// a smaller overlay cuts the end off the guest's disk
			bad = append(bad, fieldErr(fmt.Sprintf("spec.disks[%d].size", first+i), d.Size,
				fmt.Sprintf("is %s, smaller than image %q (%s): use at least %s, or leave size unset to take the image's size",
					sizeString(n), d.Image, sizeString(vsize), sizeString(vsize))))
		}
	}
	if len(bad) > 0 {
		return invalid(bad...)
	}
	var made []string
	defer func() {
		if err != nil {
			for _, p := range made {
				os.Remove(p)
			}
		}
	}()
	for i, d := range disks {
		path := m.diskPath(vm.Metadata.UID, d.Name)
		args := []string{"create", "-q", "-f", "qcow2"}
		if base := bases[i]; base != nil {
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

// sizeString writes a byte count in the largest binary unit that divides
// it, so that two sizes compared in a message read exactly.
func sizeString(n int64) string {
	for _, u := range []struct {
		unit  string
		bytes int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.bytes && n%u.bytes == 0 {
			return fmt.Sprintf("%d %s", n/u.bytes, u.unit)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

func runTool(ctx context.Context, bin string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := childCommand(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runChild(cmd); err != nil {
		return fmt.Errorf("%s %s: %v: %s", filepath.Base(bin), args[0], err, strings.TrimSpace(out.String()))
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

// inspectImage reads an image's format and size and refuses images that
// reference other files: a base with a backing file or an external data
// file could make a VM read any file on the host. With f, qemu-img reads
// that open file (as /dev/fd/3) and path only names it in errors.
func (m *Manager) inspectImage(ctx context.Context, path string, f *os.File) (imgInfo, error) {
	var info imgInfo
	bin, err := m.qemuImg()
	if err != nil {
		return info, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	arg := path
	cmd := childCommand(ctx, bin, "info", "--output=json")
	if f != nil {
		arg = "/dev/fd/3"
		cmd.ExtraFiles = []*os.File{f}
	}
	cmd.Args = append(cmd.Args, arg)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := runChild(cmd); err != nil {
		msg := strings.TrimSpace(strings.ReplaceAll(stderr.String(), arg, path))
		if msg == "" {
			return info, fmt.Errorf("qemu-img info %s: %w", path, err)
		}
		return info, fmt.Errorf("qemu-img info %s: %w: %s", path, err, msg)
	}
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
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
