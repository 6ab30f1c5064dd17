package webterm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// fqdnLookupTimeout caps the DNS question for the host's full name: the
// web terminal must start on a host whose resolver does not answer.
const fqdnLookupTimeout = time.Second

// LocalNames returns the names and addresses the web terminal's
// certificate (and its Origin allow-list) carries: the host name, its
// full name when one is known, "localhost", every address of an
// interface that is up (not loopback, not link-local), 127.0.0.1 and
// ::1. Names are lower case; both lists are sorted and without
// duplicates.
//
// hostRoot "/" (or "") is this host: os.Hostname, /etc/hosts, and the
// resolver for the full name (at most a second). Another root is a
// captured tree: its etc/hostname and etc/hosts, never the resolver. The
// addresses are always this host's interfaces.
func LocalNames(hostRoot string) (names []string, addrs []netip.Addr, err error) {
	live := hostRoot == "" || hostRoot == "/"
	if hostRoot == "" {
		hostRoot = "/"
	}
	host, err := hostName(hostRoot, live)
	if err != nil {
		return nil, nil, err
	}
	names = []string{"localhost", host}
	fqdn := hostsFQDN(filepath.Join(hostRoot, "etc", "hosts"), host)
	if fqdn == "" && live {
		fqdn = dnsFQDN(host)
	}
	if fqdn != "" {
		names = append(names, fqdn)
	}
	slices.Sort(names)
	names = slices.Compact(names)

	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, nil, fmt.Errorf("host addresses: %w", err)
	}
	var list []ifaceAddrs
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		a, err := ifc.Addrs()
		if err != nil {
			return nil, nil, fmt.Errorf("host addresses: interface %s: %w", ifc.Name, err)
		}
		list = append(list, ifaceAddrs{flags: ifc.Flags, addrs: a})
	}
	return names, usableAddrs(list), nil
}

// hostName is the host's name, lower case: os.Hostname for this host,
// etc/hostname under another root.
func hostName(hostRoot string, live bool) (string, error) {
	var name, from string
	if live {
		n, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("host name: %w", err)
		}
		name, from = n, "the kernel"
	} else {
		from = filepath.Join(hostRoot, "etc", "hostname")
		data, err := os.ReadFile(from)
		if err != nil {
			return "", fmt.Errorf("host name: %w", err)
		}
		name = firstLine(data)
	}
	name = normalName(name)
	switch {
	case name == "":
		return "", fmt.Errorf("host name (from %s): empty", from)
	case !validDNSName(name):
		return "", fmt.Errorf("host name %q (from %s): not a DNS name", name, from)
	}
	return name, nil
}

// firstLine is the first line that is neither blank nor a comment.
func firstLine(data []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	return ""
}

// hostsFQDN is the host's full name from a hosts file, the way `hostname
// -f` finds it without DNS: on a line that names the host, a name that
// starts with the host name and a dot ("127.0.1.1 web1.example.com web1").
// "" when there is none, or the file cannot be read (it is a hint, not
// state).
func hostsFQDN(path, host string) string {
	if strings.Contains(host, ".") {
		return "" // the host name is already a full one
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		aliases := f[1:]
		for i := range aliases {
			aliases[i] = normalName(aliases[i])
		}
		if !slices.Contains(aliases, host) {
			continue
		}
		for _, a := range aliases {
			if strings.HasPrefix(a, host+".") && validDNSName(a) {
				return a
			}
		}
	}
	return ""
}

// fqdnLookup is the resolver's answer for a name's canonical name; a
// variable so that a test can stand in for DNS.
var fqdnLookup = net.DefaultResolver.LookupCNAME

// dnsFQDN asks the resolver for the host's canonical name (the search
// domains apply), within fqdnLookupTimeout; "" when it does not answer
// in time or answers with a name that is not the host's.
func dnsFQDN(host string) string {
	if strings.Contains(host, ".") {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), fqdnLookupTimeout)
	defer cancel()
	cname, err := fqdnLookup(ctx, host)
	if err != nil {
		return ""
	}
	cname = normalName(cname)
	if !strings.HasPrefix(cname, host+".") || !validDNSName(cname) {
		return "" // the host itself (from /etc/hosts), or an alias elsewhere
	}
	return cname
}

// ifaceAddrs are one interface's flags and addresses.
type ifaceAddrs struct {
	flags net.Flags
	addrs []net.Addr
}

// usableAddrs are the addresses a browser could reach the host by: those
// of interfaces that are up and not loopback, without link-local,
// multicast or unspecified addresses and without zones, plus 127.0.0.1
// and ::1; sorted, without duplicates.
func usableAddrs(list []ifaceAddrs) []netip.Addr {
	out := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	for _, ifc := range list {
		if ifc.flags&net.FlagUp == 0 || ifc.flags&net.FlagLoopback != 0 {
			continue
		}
		for _, a := range ifc.addrs {
			var ip net.IP
			switch v := a.(type) {
			case *net.IPNet:
				ip = v.IP
			case *net.IPAddr:
				ip = v.IP
			default:
				continue
			}
			addr, ok := netip.AddrFromSlice(ip)
			if !ok {
				continue
			}
			addr = addr.Unmap().WithZone("")
			if addr.IsLoopback() || addr.IsLinkLocalUnicast() || addr.IsMulticast() || addr.IsUnspecified() {
				continue
			}
			out = append(out, addr)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
