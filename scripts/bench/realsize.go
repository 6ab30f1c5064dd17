package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// realsizeBench measures, on a 1 GiB test guest with ~770 MiB of dirty
// RAM and 1 GiB of data on its disk, virt's memory snapshot, its restore
// and vm save against QEMU's own commands sent by hand over QMP in the
// same run (snapshot-save, snapshot-load, and stop + migrate to a file by
// exec:cat with virt's bandwidth limit, none): what virt adds over what
// QEMU must do. Runs alternate virt
// and by hand so that a change of load hits both.
func realsizeBench(virt, guestDir string, n int) (failed bool) {
	r := newRig(virt, guestDir, "realsize", "vcr")
	if r == nil {
		return false
	}
	defer runCleanups()
	if n > 4 {
		n = 4 // each run moves ~800 MiB under TCG; even, for the ABBA order
	}
	r.run("vm", "create", "rb", "--kernel", r.kernel, "--initrd", r.initrd, "--memory", "1G", "--disk", "2G", "--cmdline", "console=ttyS0 quiet")
	disks, _ := filepath.Glob(filepath.Join(r.root, "var/lib/virtcon/vms/*/disk-root.qcow2"))
	if len(disks) != 1 {
		fatal(fmt.Errorf("realsize bench: no disk of rb (%q)", disks))
	}
	vmDir := filepath.Dir(disks[0])
	uid := filepath.Base(vmDir)
	if o, err := exec.Command("qemu-io", "-f", "qcow2", "-c", "write -P 0x5a 0 1G", disks[0]).CombinedOutput(); err != nil {
		fatal(fmt.Errorf("qemu-io write: %v: %s", err, o))
	}
	r.run("vm", "start", "rb")
	waitReady(r.root, 1, 3*time.Minute)
	start := time.Now()
	r.console("rb", `mount -o remount,size=864m /dev/shm && dd if=/dev/urandom of=/dev/shm/u bs=1M count=64 2>/dev/null && for i in $(seq 12); do cat /dev/shm/u; done >/dev/shm/f && rm /dev/shm/u && echo "FILL""ED=$(($(stat -c %s /dev/shm/f)>>20))"`, "FILLED=768", 3*time.Minute)
	fmt.Printf("%-28s 768 MiB of a 1 GiB guest's RAM filled in %v (urandom 64 MiB, cat x12)\n", "realsize", time.Since(start).Round(time.Millisecond))
	sock := filepath.Join(r.root, "run/virtcon/vms", uid, "qmp.sock")

	var snapV, snapQ, loadV, loadQ, saveV, saveQ []time.Duration
	virtSnap := func(i int) {
		s := fmt.Sprintf("v%d", i)
		t0 := time.Now()
		r.run("vm", "snapshot", "create", "rb", s, "--memory")
		snapV = append(snapV, time.Since(t0))
		t0 = time.Now()
		r.run("vm", "snapshot", "restore", "rb", s, "--force")
		loadV = append(loadV, time.Since(t0))
		r.run("vm", "snapshot", "delete", "rb", s)
	}
	handSnap := func(i int) {
		q := dialQMP(sock)
		defer q.close()
		nodes := q.diskNodes()
		h := fmt.Sprintf("h%d", i)
		t0 := time.Now()
		q.job("snapshot-save", map[string]any{"tag": h, "vmstate": nodes[0], "devices": nodes})
		snapQ = append(snapQ, time.Since(t0))
		t0 = time.Now()
		q.job("snapshot-load", map[string]any{"tag": h, "vmstate": nodes[0], "devices": nodes})
		loadQ = append(loadQ, time.Since(t0))
		q.job("snapshot-delete", map[string]any{"tag": h, "devices": nodes})
	}
	virtSave := func(int) {
		t0 := time.Now()
		r.run("vm", "save", "rb")
		saveV = append(saveV, time.Since(t0))
		r.run("vm", "start", "rb") // the resume, not timed here
	}
	state := filepath.Join(r.root, "bench.state")
	handSave := func(i int) {
		q := dialQMP(sock)
		defer q.close()
		t0 := time.Now()
		q.exec("stop", nil)
		// virt lifts QEMU's default 128 MiB/s limit too (vm/save.go)
		q.exec("migrate-set-parameters", map[string]any{"max-bandwidth": int64(math.MaxInt64 / 2)})
		q.exec("migrate", map[string]any{"uri": "exec:cat > " + state})
		q.waitMigration()
		saveQ = append(saveQ, time.Since(t0))
		q.exec("cont", nil)
		if st, err := os.Stat(state); err == nil && i == 0 {
			fmt.Printf("%-28s migrate by hand wrote %s\n", "realsize", humanSize(st.Size()))
		}
		os.Remove(state)
	}
	// ABBA: which goes first alternates, so that what the one before
	// left (freed qcow2 clusters to reuse, the page cache) favours neither
	for i := 0; i < n; i++ {
		if i%2 == 0 {
			virtSnap(i)
			handSnap(i)
			virtSave(i)
			handSave(i)
		} else {
			handSnap(i)
			virtSnap(i)
			handSave(i)
			virtSave(i)
		}
	}
	row := func(name string, t []time.Duration, base []time.Duration, target float64) {
		sortD(t)
		ratio, verdict := "-", "-"
		if base != nil {
			x := float64(median(t)) / float64(median(base))
			ratio = fmt.Sprintf("%.2fx", x)
			verdict = "ok"
			if x > target {
				verdict, failed = "MISSED", true
			}
			verdict = fmt.Sprintf("<= %.1fx %s", target, verdict)
		}
		fmt.Printf("%-28s %10s %10s %10s %12s %s\n", name, ms(median(t)), ms(t[0]), ms(t[len(t)-1]), ratio, verdict)
	}
	fmt.Printf("%-28s %10s %10s %10s %12s %s\n", "1 GiB guest, 768 MiB dirty", "median", "min", "max", "vs by hand", "target")
	row("QMP snapshot-save by hand", snapQ, nil, 0)
	row("virt snapshot create --mem", snapV, snapQ, 1.1)
	row("QMP snapshot-load by hand", loadQ, nil, 0)
	row("virt snapshot restore", loadV, loadQ, 1.1)
	row("QMP stop+migrate by hand", saveQ, nil, 0)
	row("virt vm save", saveV, saveQ, 1.1)
	return failed
}

// console types command on the VM's serial console (virt vm console) and
// waits for want in what comes back, then detaches (Ctrl-]).
func (r *rig) console(name, command, want string, timeout time.Duration) {
	cmd := exec.Command(r.virt, "--root", r.root, "vm", "console", name)
	in, _ := cmd.StdinPipe()
	var out bytes.Buffer
	pr, pw, _ := os.Pipe()
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		fatal(err)
	}
	pw.Close()
	got := make(chan struct{})
	go func() {
		sc := bufio.NewReader(pr)
		buf := make([]byte, 4096)
		for {
			k, err := sc.Read(buf)
			out.Write(buf[:k])
			if bytes.Contains(out.Bytes(), []byte(want)) {
				close(got)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	fmt.Fprintf(in, "\n%s\n", command)
	select {
	case <-got:
	case <-time.After(timeout):
		in.Write([]byte{0x1d})
		fatal(fmt.Errorf("console of %s: no %q after %v", name, want, timeout))
	}
	in.Write([]byte{0x1d})
	cmd.Wait()
}

// qmpConn is the bench's own QMP client: the baseline is QEMU's commands
// with nothing of virt's in between.
type qmpConn struct {
	c  net.Conn
	rd *bufio.Reader
}

func dialQMP(sock string) *qmpConn {
	var c net.Conn
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err = net.Dial("unix", sock); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		fatal(fmt.Errorf("QMP %s: %v", sock, err))
	}
	q := &qmpConn{c: c, rd: bufio.NewReader(c)}
	q.read() // the greeting
	q.exec("qmp_capabilities", nil)
	return q
}

func (q *qmpConn) close() { q.c.Close() }

// read reads one message; events are returned like any other.
func (q *qmpConn) read() map[string]json.RawMessage {
	q.c.SetReadDeadline(time.Now().Add(10 * time.Minute))
	line, err := q.rd.ReadBytes('\n')
	if err != nil {
		fatal(fmt.Errorf("QMP read: %v", err))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		fatal(fmt.Errorf("QMP: %v: %s", err, line))
	}
	return m
}

// exec sends command and waits for its reply, however long QEMU takes.
func (q *qmpConn) exec(command string, args map[string]any) json.RawMessage {
	msg := map[string]any{"execute": command}
	if args != nil {
		msg["arguments"] = args
	}
	b, _ := json.Marshal(msg)
	if _, err := q.c.Write(append(b, '\n')); err != nil {
		fatal(fmt.Errorf("QMP %s: %v", command, err))
	}
	for {
		m := q.read()
		if e, ok := m["error"]; ok {
			fatal(fmt.Errorf("QMP %s: %s", command, e))
		}
		if r, ok := m["return"]; ok {
			return r
		}
	}
}

// job runs a QMP job to its end and dismisses it.
func (q *qmpConn) job(command string, args map[string]any) {
	id := "bench-" + command
	args["job-id"] = id
	q.exec(command, args)
	for {
		var jobs []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		json.Unmarshal(q.exec("query-jobs", nil), &jobs)
		for _, j := range jobs {
			if j.ID == id && j.Status == "concluded" {
				q.exec("job-dismiss", map[string]any{"id": id})
				if j.Error != "" {
					fatal(fmt.Errorf("QMP %s: %s", command, j.Error))
				}
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// diskNodes are the node names of the VM's writable qcow2 disks.
func (q *qmpConn) diskNodes() []string {
	var blocks []struct {
		Inserted *struct {
			NodeName string `json:"node-name"`
			Drv      string `json:"drv"`
			RO       bool   `json:"ro"`
		} `json:"inserted"`
	}
	json.Unmarshal(q.exec("query-block", nil), &blocks)
	var out []string
	for _, b := range blocks {
		if b.Inserted != nil && b.Inserted.Drv == "qcow2" && !b.Inserted.RO {
			out = append(out, b.Inserted.NodeName)
		}
	}
	if len(out) == 0 {
		fatal(fmt.Errorf("QMP query-block: no writable qcow2 disk"))
	}
	return out
}

// waitMigration polls query-migrate until the migration completed.
func (q *qmpConn) waitMigration() {
	for {
		var info struct {
			Status string `json:"status"`
		}
		json.Unmarshal(q.exec("query-migrate", nil), &info)
		switch info.Status {
		case "completed":
			return
		case "failed", "cancelled":
			fatal(fmt.Errorf("QMP migrate: %s", info.Status))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
