# virtcon — run `make help` for the targets.
SHELL := /bin/bash
# sudo resets PATH (secure_path), which usually lacks /usr/local/go/bin.
GO ?= $(shell command -v go || echo /usr/local/go/bin/go)
export GO
GOBIN := $(shell $(GO) env GOPATH)/bin
STATICCHECK ?= $(shell command -v staticcheck || echo $(GOBIN)/staticcheck)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The commit is stamped explicitly: Go's own VCS stamp is off where GOFLAGS says -buildvcs=false.
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -s -w -X github.com/virtcon/virtcon/internal/buildinfo.Version=$(VERSION) -X github.com/virtcon/virtcon/internal/buildinfo.Commit=$(COMMIT)
VIRT_BIN ?= bin/virt
# The race detector slows the integration tests; CI keeps it on.
TESTFLAGS ?= -race -count=1

.PHONY: help build virt virt-director build-deps install run deps test test-unit test-integration test-deb lint bench docs clean deb

help: ## show this help
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

build: virt virt-director ## build bin/virt, bin/dcui and bin/virt-director
	CGO_ENABLED=1 $(GO) build -trimpath -buildmode=pie -ldflags '$(LDFLAGS)' -o bin/dcui ./cmd/dcui  # PAM: cgo, never silently without

virt: ## build bin/virt only (VIRT_BIN=PATH elsewhere)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(VIRT_BIN) ./cmd/virt  # static: starts faster

virt-director: ## build bin/virt-director only (the director: etcd embedded, never linked into virt)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/virt-director ./cmd/virt-director  # static, like virt

run: build-deps build ## build, install the PAM service if missing, and open the DCUI here (root)
	@[ -e /etc/pam.d/virtcon ] || install -m 0644 packaging/pam.d/virtcon /etc/pam.d/virtcon
	@getent group virtcon-admin >/dev/null || groupadd --system virtcon-admin
	@echo "dcui: log in as root, or as a member of virtcon-admin (usermod -aG virtcon-admin USER); F10/q quits"
	bin/dcui

build-deps: ## install what building needs (gcc, libpam0g-dev) when missing (root)
	scripts/install-deps.sh --build

install: build-deps build ## install binaries, the PAM service, the admin group and the console units (root)
	install -m 0755 bin/virt bin/dcui bin/virt-director /usr/local/bin/
	install -m 0644 packaging/pam.d/virtcon /etc/pam.d/virtcon
	getent group virtcon-admin >/dev/null || groupadd --system virtcon-admin
	install -d /etc/systemd/system/getty@tty1.service.d
	install -m 0644 packaging/systemd/getty@tty1.service.d/virtcon-dcui.conf /etc/systemd/system/getty@tty1.service.d/
	install -m 0644 packaging/systemd/virtcon-dcui-serial@.service packaging/systemd/virtcon-guests.service packaging/systemd/virtcon.slice packaging/systemd/virtcon-webterm.service packaging/systemd/virtcon-agent.service packaging/systemd/virtcon-director.service /etc/systemd/system/
	install -d /usr/local/share/doc/virtcon && install -m 0644 docs/*.md /usr/local/share/doc/virtcon/
	@if [ -d /run/systemd/system ]; then systemctl daemon-reload; echo "DCUI on tty1 after: systemctl restart getty@tty1; serial: systemctl enable --now virtcon-dcui-serial@ttyS0"; fi

# nfpm builds the .deb; from the Go module proxy, pinned, fetched with retries (not in go.mod: no program links it)
NFPM ?= GO=$(GO) scripts/nfpm.sh

deb: build ## build dist/virtcon_<version>_amd64.deb: binaries, man pages, completions, PAM, units, conffiles (nfpm)
	rm -rf dist && mkdir -p dist
	$(GO) run ./scripts/deb -version '$(VERSION)' -commit '$(COMMIT)' -date "$$(git log -1 --format=%ct 2>/dev/null || date +%s)" -virt bin/virt -dcui bin/dcui -director bin/virt-director -work build/deb
	$(NFPM) package -f build/deb/nfpm.yaml -p deb -t dist/
	@ls dist/*.deb

deps: ## install the system packages and tools the tests need (root)
	scripts/install-deps.sh

test: deps lint guest ## install what the tests need, then lint and run unit + integration tests (root)
	$(GO) test $(TESTFLAGS) -timeout 20m -tags integration ./...

test-deb: deps ## build the .deb, lintian it, install, check and purge it on this machine (root; CI runs it after test)
	VIRTCON_DEB_TEST=1 $(GO) test -count=1 -timeout 15m -tags integration -run 'TestIntegrationDebPackage' -v ./integration/

test-unit: ## unit tests only (no root, no QEMU)
	$(GO) test $(TESTFLAGS) ./...

test-integration: ## integration tests only (root; real KVM probe, QEMU, ...)
	$(GO) test $(TESTFLAGS) -tags integration -run 'Integration' ./...

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags integration ./...

bench: build guest ## benchmarks: host info/check vs virt-host-validate, vm start vs raw qemu, vm list with 200 VMs, vm stats of 50 running VMs vs sequential and ps, host boot vs 5 vm starts and libvirt-guests, DCUI first frame/RSS/keypress, web terminal login/keystroke/RSS, director enrolment/sessions/dispatch with 1000 simulated agents, resync after data loss, replica failover, two replicas at scale, a 1 GiB guest's memory snapshot/restore/save vs QEMU's own QMP commands
	scripts/install-deps.sh libvirt-clients virtinst
	scripts/libvirt-peer.sh
	$(GO) run ./scripts/bench -virt bin/virt
# real size (TCG): a 1 GiB guest with 768 MiB dirty: memory snapshot, restore, vm save vs snapshot-save, snapshot-load, stop+migrate by hand over QMP
	$(GO) run ./scripts/bench -virt bin/virt -only realsize -n 4
	set -o pipefail; $(GO) test -tags integration -count=1 -run 'TestApplyBenchIntegration' -v ./netcfg/ | grep -E 'apply|PASS|FAIL|ok'
# DCUI (root, tmux, PAM): first frame vs `virt version` on a pty, RSS with 50 VMs, key latency while QMP hangs
	VIRTCON_BENCH=1 $(GO) test -tags integration -count=1 -run 'TestDCUIBench|TestWebtermBench' -v ./integration/
	$(GO) test -count=1 -run TestKeypressDuringSlowCall -v ./tui/vms/
# disk hot-plug (TCG): virt vm disk add to the guest seeing /sys/block/vdb, vs a cold add to the stopped VM + start until the guest is up with it
	set -o pipefail; VIRTCON_BENCH=1 $(GO) test -tags integration -count=1 -run 'TestIntegrationVMHotplugDisk' -v ./integration/ | grep -E 'bench:|PASS|FAIL|ok'
# director: 1000 simulated agents on loopback (enrolment 16 in flight; one mTLS session each at 10 s and 1 s heartbeats; then 2000 tasks, 4 in flight: CreateTask to the agent's Queued on WatchTask); resync of 1000 x 50 VMs after kill -9 and rm -rf <data>/etcd; failover of 1000 agents between two replicas over 3 etcd members; scale: 2000 agents at 10 s heartbeats over two replicas (10,000 do not all register within 5 min on 2 shared cores)
	set -e; for m in all resync failover scale; do $(GO) run ./scripts/dirload -director bin/virt-director -mode $$m -scale-n 2000; done

docs: build ## regenerate docs/cli-reference.md and docs/virt-director-reference.md
	bin/virt gen-docs docs/cli-reference.md
	bin/virt-director gen-docs docs/virt-director-reference.md

.PHONY: screenshots
screenshots: build guest ## render docs/img/dcui-*.png from the DCUI in tmux (root; temporary user, PAM service and VMs)
	scripts/dcui-screenshots.sh

clean: ## remove build outputs
	rm -rf bin build

.PHONY: guest
guest: ## build the test guest (kernel + initramfs) under build/guest
	scripts/mkguest.sh

.PHONY: vendor-xterm
vendor-xterm: ## re-fetch xterm.js + addon-fit (npm pack), check them against webterm/static/vendor/INTEGRITY, copy them in (UPDATE=1 re-records)
	scripts/vendor-xterm.sh $(if $(UPDATE),--update)

.PHONY: proto
proto: ## regenerate the director API's Go code (api/directorv1) from api/virtcon/**/*.proto (protoc + go.mod's plugins)
	GO=$(GO) scripts/proto.sh .
