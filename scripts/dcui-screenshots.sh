#!/usr/bin/env bash
# Renders the DCUI screenshots in docs/img/dcui-*.png from a real terminal:
# bin/dcui runs in a detached tmux session at 80x24, is driven with
# send-keys like an operator would, and each screen is captured with
# `tmux capture-pane -e` and turned into a PNG with freeze
# (github.com/charmbracelet/freeze).
#
# Run as root (make screenshots). It sets up, and removes again at exit:
#   - a state root /tmp/vcshots (--root; short, as QMP and serial sockets
#     live under it and a unix socket path must stay < 107 bytes) with three
#     test-guest VMs, web-01 running, db-01 and build-01 stopped, and a
#     network.yaml that describes the live management interface;
#   - a PAM service /etc/pam.d/virtcon-shots-XXXXXX (a copy of
#     packaging/pam.d/virtcon);
#   - a user (alice, or $SHOTS_USER) with a random password set through
#     chpasswd's standard input and typed into the DCUI by a tmux paste
#     buffer, never on a command line;
#   - the group virtcon-admin, when the host does not have it yet;
#   - a private tmux server.
# A run killed before its cleanup (kill -9) is undone by the next run; two
# runs at once are refused (a lock on this file).
# It never presses a key that changes the host: the Power screen's dialog
# is opened and cancelled with esc (only a typed y would reboot), network
# changes are never reviewed or applied, and no VM is started or stopped
# from the DCUI.
#
# Passes: TERM=xterm-256color (rich tier) for every screen, then TERM=vt100
# with --console --tty ttyS0 (the plain tier a serial console gets) for the
# status and VMs screens.
#
# Environment:
#   OUT         where the PNGs go (default docs/img)
#   FREEZE      the freeze binary (default: freeze on PATH, else
#               build/tools/freeze, installed there with go install at the
#               pinned version when missing)
#   SKIP_BUILD  1: use bin/ and build/guest as they are (by default it runs
#               make build guest, with VERSION naming the commit without
#               "-dirty": the images show it, and the docs being edited are
#               what makes the tree dirty)
#   SHOTS_USER  the temporary login (default alice; must not exist, or be
#               a leftover of this script)
#   KEEP_ANSI   a directory to keep the raw captures (.ansi) in
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

freeze_version=v0.2.2
cols=80
rows=24
out=${OUT:-docs/img}
shots_user=${SHOTS_USER:-alice}
# The GECOS field marks the user as ours: a leftover of a killed run may be
# removed, anybody else's account never.
marker="virtcon dcui-screenshots (temporary)"

log() { printf 'dcui-screenshots: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

[[ $EUID -eq 0 ]] || die "run as root: it creates a user and a PAM service and starts VMs (sudo make screenshots)"
for tool in flock tmux perl useradd userdel groupadd groupdel chpasswd getent qemu-system-x86_64; do
	command -v "$tool" >/dev/null || die "$tool not found (apt-get install tmux perl passwd qemu-system-x86)"
done
# one run at a time; fd 9 is closed for the VMs and the tmux server (9<&-),
# so a killed run's leftovers do not hold the lock the next run needs
exec 9<"${BASH_SOURCE[0]}"
flock -n 9 || die "another run is in progress"
[[ -e /etc/pam.d/common-auth ]] || die "no PAM stack: /etc/pam.d/common-auth is missing"
[[ $shots_user =~ ^[a-z_][a-z0-9_-]{0,30}$ ]] || die "SHOTS_USER=$shots_user: not a valid user name"

# ---- tools and binaries -------------------------------------------------

if [[ ${SKIP_BUILD:-} != 1 ]]; then
	make build guest VERSION="$(git describe --tags --always 2>/dev/null || echo dev)"
fi
[[ -x bin/dcui && -x bin/virt && -e build/guest/vmlinuz && -e build/guest/initrd.img ]] ||
	die "bin/dcui, bin/virt or build/guest missing: run make build guest"

freeze=${FREEZE:-$(command -v freeze || true)}
if [[ -z $freeze ]]; then
	freeze=$repo/build/tools/freeze
	if [[ ! -x $freeze ]]; then
		go=$(command -v go || echo /usr/local/go/bin/go)
		log "installing freeze $freeze_version into build/tools"
		GOBIN=$repo/build/tools "$go" install "github.com/charmbracelet/freeze@$freeze_version"
	fi
fi
[[ -x $freeze ]] || die "freeze not found at $freeze"

# ---- temporary host state, removed by cleanup ---------------------------

tag=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
# A fixed root keeps the paths the screens show the same from run to run.
root=/tmp/vcshots
root_marker=$root/.dcui-screenshots
work=$root/work # captures
service=virtcon-shots-$tag
socket=$root/tmux.sock # a private tmux server
group=virtcon-admin
made_root=
made_group=
made_user=
made_service=
vms=(web-01 db-01 build-01)

# qemu_pids lists the live QEMU processes whose command line names $root
# (the VMs of this script; nothing else uses that path).
qemu_pids() {
	local d cmd
	for d in /proc/[0-9]*; do
		cmd=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
		[[ $cmd == *qemu-system* && $cmd == *"$root/"* ]] && echo "${d#/proc/}"
	done
	return 0
}

# remove_root stops the DCUI and the VMs under $root and removes it.
remove_root() {
	local name pid
	tmux -S "$socket" kill-server 2>/dev/null
	for name in "${vms[@]}"; do
		bin/virt --root "$root" vm kill "$name" >/dev/null 2>&1
	done
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		pid=$(qemu_pids)
		[[ -z $pid ]] && break
		# shellcheck disable=SC2086 # one PID a word
		kill -KILL $pid 2>/dev/null
		sleep 0.2
	done
	rm -rf "$root"
}

cleanup() {
	local rc=$?
	set +e
	tmux -S "$socket" kill-server 2>/dev/null
	[[ -n $made_root ]] && remove_root
	[[ -n $made_user ]] && userdel "$shots_user"
	[[ -n $made_group ]] && groupdel "$group"
	[[ -n $made_service ]] && rm -f "/etc/pam.d/$service"
	# say so if anything is left
	[[ -n $made_user ]] && getent passwd "$shots_user" >/dev/null && log "warning: user $shots_user is still there"
	[[ -n $made_group ]] && getent group "$group" >/dev/null && log "warning: group $group is still there"
	[[ -e /etc/pam.d/$service ]] && log "warning: /etc/pam.d/$service is still there"
	[[ -n $made_root && -n $(qemu_pids) ]] && log "warning: QEMU processes under $root still run: $(qemu_pids | tr '\n' ' ')"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Leftovers of a run killed before its cleanup (kill -9, power loss): the
# user carries the marker in its GECOS field, and the root's marker file
# lists the PAM service and the group that run made.
if getent passwd "$shots_user" >/dev/null; then
	[[ $(getent passwd "$shots_user" | cut -d: -f5) == "$marker" ]] ||
		die "user $shots_user exists and is not ours: set SHOTS_USER to a name that does not exist"
	log "removing user $shots_user left by an earlier run"
	userdel "$shots_user"
fi
if [[ -e $root || -L $root ]]; then
	[[ -f $root_marker && ! -L $root ]] || die "$root exists and is not ours: remove it first"
	log "undoing an earlier run that did not clean up"
	set +e
	while read -r what name; do
		case $what in
		service) [[ $name == virtcon-shots-* ]] && rm -f "/etc/pam.d/$name" ;;
		group) getent group "$name" >/dev/null && [[ -z $(getent group "$name" | cut -d: -f4) ]] && groupdel "$name" ;;
		esac
	done <"$root_marker"
	remove_root
	set -e
fi

mkdir -m 0700 "$root"
made_root=1
touch "$root_marker"
mkdir "$work"
if ! getent group "$group" >/dev/null; then
	echo "group $group" >>"$root_marker"
	groupadd --system "$group"
	made_group=1
fi
echo "service $service" >>"$root_marker"
install -m 0644 -T packaging/pam.d/virtcon "/etc/pam.d/$service"
made_service=1
useradd -M -N -s /usr/sbin/nologin -c "$marker" -G "$group" "$shots_user"
made_user=1
password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
printf '%s:%s\n' "$shots_user" "$password" | chpasswd

# The Network screen compares network.yaml with the live host: describe
# the management interface as it is (the file is never applied).
dev=$(ip -4 route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}' || true)
gw=$(ip -4 route show default 2>/dev/null | awk '$2 == "via" { print $3; exit }' || true)
addr=
if [[ -n $dev ]]; then
	addr=$(ip -4 -o addr show dev "$dev" scope global 2>/dev/null | awk '{ print $4; exit }' || true)
fi
dns=$(awk '$1 == "nameserver" { print $2; exit }' /etc/resolv.conf 2>/dev/null || true)
if [[ -n $dev && -n $addr ]]; then
	mkdir -p "$root/etc/virtcon"
	{
		echo "apiVersion: virtcon/v1"
		echo "kind: HostNetwork"
		echo "hostname: $(hostname)"
		if [[ -n $dns ]]; then echo "dns: {servers: [$dns]}"; fi
		echo "management:"
		echo "  interface: $dev"
		echo "  addresses: [$addr]"
		if [[ -n $gw ]]; then echo "  gateway: $gw"; fi
	} >"$root/etc/virtcon/network.yaml"
fi

virt() { bin/virt --root "$root" "$@" 9<&-; }
log "creating VMs under $root"
virt vm create web-01 --kernel build/guest/vmlinuz --initrd build/guest/initrd.img --memory 256 --start >/dev/null
virt vm create db-01 --kernel build/guest/vmlinuz --initrd build/guest/initrd.img --memory 512 >/dev/null
virt vm create build-01 --kernel build/guest/vmlinuz --initrd build/guest/initrd.img --memory 1024 --cpus 2 >/dev/null

# ---- driving the terminal -----------------------------------------------

cat >"$work/tmux.conf" <<'EOF'
set -g status off
set -g remain-on-exit on
set -g history-limit 100
EOF

# start_dcui TERM ARGS... runs bin/dcui in a fresh session "dcui" with a
# clean environment (no NO_COLOR, no COLORTERM from the caller).
start_dcui() {
	local term=$1
	shift
	tmux -S "$socket" kill-server 2>/dev/null || true
	LANG=C.UTF-8 tmux -u -S "$socket" -f "$work/tmux.conf" new-session -d -x "$cols" -y "$rows" -s dcui \
		env -i PATH="$PATH" HOME=/root LANG=C.UTF-8 TERM="$term" \
		"$repo/bin/dcui" --root "$root" --pam-service "$service" --admin-group "$group" "$@" 9<&-
}

screen() { tmux -S "$socket" capture-pane -p -t dcui; }

# wait_for TEXT... polls the screen until every TEXT is on it.
wait_for() {
	local deadline=$((SECONDS + ${WAIT:-20})) s t missing
	while :; do
		s=$(screen)
		missing=
		for t in "$@"; do
			if [[ $s != *"$t"* ]]; then
				missing=$t
				break
			fi
		done
		[[ -z $missing ]] && return 0
		((SECONDS < deadline)) || die "screen lacks \"$missing\" after ${WAIT:-20}s:"$'\n'"$s"
		sleep 0.1
	done
}

# wait_gone TEXT polls the screen until TEXT is no longer on it.
wait_gone() {
	local deadline=$((SECONDS + ${WAIT:-20}))
	while [[ $(screen) == *"$1"* ]]; do
		((SECONDS < deadline)) || die "\"$1\" still on the screen after ${WAIT:-20}s:"$'\n'"$(screen)"
		sleep 0.1
	done
}

# wait_spark N waits until both Load sparklines hold N samples.
wait_spark() {
	local deadline=$((SECONDS + 60)) n
	while :; do
		n=$(screen | perl -CSD -ne 'if (/Load\s+CPU(.*?)\s+(?:\d+%|--)\s+Mem(.*?)\s+(?:\d+%|--)/) {
			my ($c, $m) = ($1, $2); my $a = () = $c =~ /\S/g; my $b = () = $m =~ /\S/g;
			print $a < $b ? $a : $b }')
		[[ ${n:-0} -ge $1 ]] && return 0
		((SECONDS < deadline)) || die "Load sparklines hold ${n:-0} samples after 60s, want $1:"$'\n'"$(screen)"
		sleep 0.5
	done
}

# settle waits for two identical frames 200 ms apart (the clock in the
# header ticks once a second, so this settles at once unless a redraw is
# under way).
settle() {
	local a b
	a=$(tmux -S "$socket" capture-pane -e -p -t dcui)
	for _ in $(seq 25); do
		sleep 0.2
		b=$(tmux -S "$socket" capture-pane -e -p -t dcui)
		[[ $a == "$b" ]] && return 0
		a=$b
	done
}

keys() { tmux -S "$socket" send-keys -t dcui "$@"; }
typed() { tmux -S "$socket" send-keys -t dcui -l "$1"; }

# paste_password types the password through a tmux paste buffer (from
# stdin), so it is on no command line.
paste_password() {
	printf '%s' "$password" | tmux -S "$socket" load-buffer -b pw -
	tmux -S "$socket" paste-buffer -d -p -b pw -t dcui
}

shot() {
	settle
	tmux -S "$socket" capture-pane -e -p -t dcui >"$work/$1.ansi"
	log "captured $1"
}

login() {
	keys l
	wait_for Password "User "
	typed "$shots_user"
	keys Tab
	paste_password
	keys Enter
	wait_for "$shots_user@" "[RW]"
}

# ---- pass 1: rich tier, every screen ------------------------------------

virt vm list | grep -q 'web-01.*[Rr]unning' || die "web-01 is not running:"$'\n'"$(virt vm list)"

start_dcui xterm-256color
host=$(hostname)
wait_for "$host" MANAGEMENT HEALTH "F2/l"
wait_spark 12
shot status

# a wrong password first, so the form shows the failure and the hint
keys l
wait_for Password "User "
typed "$shots_user"
keys Tab
typed "not-the-password"
keys Enter
WAIT=30 wait_for "Login incorrect"
shot login
paste_password
keys Enter
wait_for "$shots_user@" "[RW]"
shot status-logged-in

keys v
wait_for "Virtual machines" web-01 db-01 build-01
# the running VM (the list is sorted by name; it is the last)
keys End
wait_for "virt vm stop web-01"
shot vms
keys Enter
wait_for "Force stop"
shot vm-actions
keys Escape
wait_gone "Force stop"

keys n
wait_for MANAGEMENT BRIDGES "virt net show"
shot network
keys e
wait_for "Management interface" "virt net apply"
shot network-edit
keys Escape
wait_for BRIDGES "virt net show"

keys w
wait_for SUMMARY CHECKS
shot hardware
# help on the Hardware page: the global keys, then the page's own
keys h
wait_for "close help" "Hardware"
shot help
keys Escape
wait_gone "close help"

keys g
wait_for "VM SERIAL" web-01
# web-01's serial console (tab moves between the files), searched for the
# markers the test guest prints
for _ in 1 2 3 4 5 6; do
	cli=$(screen | grep -o 'CLI: [^|│]*')
	[[ $cli == *"virt vm logs web-01"* ]] && break
	keys Tab
	deadline=$((SECONDS + 10))
	while [[ $(screen | grep -o 'CLI: [^|│]*') == "$cli" ]] && ((SECONDS < deadline)); do sleep 0.1; done
done
wait_for "virt vm logs web-01"
keys /
typed VIRTCON
keys Enter
wait_for "match 1/"
shot logs

keys d
wait_for "SUPPORT BUNDLE"
keys Enter
WAIT=120 wait_for "wrote "
shot diagnostics

keys m
wait_for "DIRECTOR"
shot director

keys p
wait_for "HOST POWER"
keys b
wait_for "Reboot the host?"
shot power
# esc cancels (so do n and enter); a typed y would reboot this machine
keys Escape
wait_gone "Reboot the host?"

keys l
wait_for "Console locked"
shot locked
keys q
tmux -S "$socket" kill-server 2>/dev/null || true

# ---- pass 2: plain tier, as on a serial console -------------------------

start_dcui vt100 --console --tty ttyS0
wait_for "$host" MANAGEMENT HEALTH "F2/l"
wait_spark 12
shot status-plain
login
keys v
wait_for "Virtual machines" web-01 db-01 build-01
shot vms-plain
tmux -S "$socket" kill-server 2>/dev/null || true

# ---- render -------------------------------------------------------------

# freeze draws each line on its own and knows only part of SGR (no 39, 49,
# 7, no state carried across lines), while tmux emits changes only. This
# rewrites every change as one complete sequence (0;attrs;fg;bg), repeats
# it at the start of each line, and turns reverse video into explicit
# colours (freeze's default foreground and background).
normalize() {
	perl -e '
		use strict; use warnings;
		local $/; my $in = <STDIN>; $in =~ s/\n+\z//;
		my %s; sub clear { %s = (fg => "", bg => "", b => 0, i => 0, u => 0, r => 0, x => 0) } clear();
		my $last = "";
		sub sgr {
			my @a = ("0");
			push @a, "1" if $s{b}; push @a, "3" if $s{i}; push @a, "4" if $s{u}; push @a, "9" if $s{x};
			my ($fg, $bg) = ($s{fg}, $s{bg});
			if ($s{r}) {
				($fg, $bg) = ($bg eq "" ? "38;2;23;23;23" : "38" . substr($bg, 2),
				              $fg eq "" ? "48;2;197;200;198" : "48" . substr($fg, 2));
			}
			push @a, $fg if $fg ne ""; push @a, $bg if $bg ne "";
			return "\e[" . join(";", @a) . "m";
		}
		my @out;
		for my $line (split /\n/, $in, -1) {
			my $o = sgr();
			$o = "" if $o eq "\e[0m";
			while ($line =~ /\G(.*?)\e\[([0-9;:]*)m/gcs) {
				$o .= $1;
				my @p = split /[;:]/, $2; @p = (0) unless @p;
				while (@p) {
					my $v = shift @p; $v = 0 if $v eq "";
					if    ($v == 0)  { clear() }
					elsif ($v == 1)  { $s{b} = 1 } elsif ($v == 22) { $s{b} = 0 }
					elsif ($v == 3)  { $s{i} = 1 } elsif ($v == 23) { $s{i} = 0 }
					elsif ($v == 4)  { $s{u} = 1 } elsif ($v == 24) { $s{u} = 0 }
					elsif ($v == 7)  { $s{r} = 1 } elsif ($v == 27) { $s{r} = 0 }
					elsif ($v == 9)  { $s{x} = 1 } elsif ($v == 29) { $s{x} = 0 }
					elsif ($v == 38 || $v == 48) {
						my $m = shift(@p) // 5; my $c;
						if ($m == 5) { $c = "5;" . (shift(@p) // 0) }
						else { $c = "2;" . join(";", map { shift(@p) // 0 } 1 .. 3) }
						$s{$v == 38 ? "fg" : "bg"} = "$v;$c";
					}
					elsif ($v == 39) { $s{fg} = "" } elsif ($v == 49) { $s{bg} = "" }
					elsif ($v >= 30 && $v <= 37)   { $s{fg} = "38;5;" . ($v - 30) }
					elsif ($v >= 90 && $v <= 97)   { $s{fg} = "38;5;" . ($v - 82) }
					elsif ($v >= 40 && $v <= 47)   { $s{bg} = "48;5;" . ($v - 40) }
					elsif ($v >= 100 && $v <= 107) { $s{bg} = "48;5;" . ($v - 92) }
				}
				$o .= sgr();
			}
			$o .= substr($line, pos($line) // 0);
			push @out, $o;
		}
		print join("\n", @out);
	'
}

# freeze at its default font (JetBrains Mono 14 px) with a window frame;
# an explicit size keeps it at 1x (its automatic size renders at 4x, over
# a megabyte an image).
mkdir -p "$out"
for f in "$work"/*.ansi; do
	name=$(basename "$f" .ansi)
	normalize <"$f" >"$work/$name.norm"
	"$freeze" --language ansi --window --border.radius 8 --border.width 1 --border.color '#515151' \
		--margin 20 --padding 20 -W 760 -H 505 -o "$out/dcui-$name.png" "$work/$name.norm" >/dev/null
	size=$(stat -c %s "$out/dcui-$name.png")
	log "wrote $out/dcui-$name.png ($((size / 1024)) KiB)"
	((size < 300 * 1024)) || log "warning: $out/dcui-$name.png is over 300 KiB"
done
if [[ -n ${KEEP_ANSI:-} ]]; then
	mkdir -p "$KEEP_ANSI"
	cp "$work"/*.ansi "$KEEP_ANSI"/
fi
