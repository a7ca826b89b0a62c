package load

import (
	"bytes"
	"fmt"
	"strconv"
)

// template is a compact review body split at the places where each request
// puts its own uid and user, so building a body is a few appends: the
// client shares the machine with the servers and must stay cheap.
type template struct {
	parts [][]byte // literal text around the slots
	slots []slot   // slots[i] goes between parts[i] and parts[i+1]
}

type slot int

const (
	slotUID slot = iota
	slotUser
)

func newTemplate(body []byte) (template, error) {
	var t template
	rest := body
	for {
		u := bytes.Index(rest, []byte(uidMarker))
		n := bytes.Index(rest, []byte(userMarker))
		if u < 0 && n < 0 {
			t.parts = append(t.parts, rest)
			break
		}
		if n < 0 || (u >= 0 && u < n) {
			t.parts = append(t.parts, rest[:u])
			t.slots = append(t.slots, slotUID)
			rest = rest[u+len(uidMarker):]
		} else {
			t.parts = append(t.parts, rest[:n])
			t.slots = append(t.slots, slotUser)
			rest = rest[n+len(userMarker):]
		}
	}
	uids, users := 0, 0
	for _, s := range t.slots {
		if s == slotUID {
			uids++
		} else {
			users++
		}
	}
	if uids != 1 || users != 1 {
		return template{}, fmt.Errorf("body has %d uid and %d user slots, want one of each", uids, users)
	}
	return t, nil
}

// build appends the body with uid and user filled in (both plain ASCII
// that needs no JSON escaping) to dst.
func (t template) build(dst []byte, uid, user []byte) []byte {
	for i, p := range t.parts {
		dst = append(dst, p...)
		if i < len(t.slots) {
			if t.slots[i] == slotUID {
				dst = append(dst, uid...)
			} else {
				dst = append(dst, user...)
			}
		}
	}
	return dst
}

// Body returns the fixture's body with the given uid and user, for tests
// and one-off requests.
func (f *Fixture) Body(uid, user string) []byte {
	return f.template.build(nil, []byte(uid), []byte(user))
}

// appendUID writes a UUID-shaped uid unique per (run, seq): the apiserver
// sends a fresh uid per request, and qn-webhook treats a repeated uid as a
// retry that takes no new window slot.
func appendUID(dst []byte, run uint32, seq uint64) []byte {
	dst = appendHex(dst, uint64(run), 8)
	dst = append(dst, '-')
	dst = appendHex(dst, seq>>48, 4)
	dst = append(dst, "-4000-8000-"...)
	return appendHex(dst, seq&(1<<48-1), 12)
}

func appendHex(dst []byte, v uint64, width int) []byte {
	const digits = "0123456789abcdef"
	for i := width - 1; i >= 0; i-- {
		dst = append(dst, digits[(v>>(4*uint(i)))&0xf])
	}
	return dst
}

// appendUser writes the user name of pool member n.
func appendUser(dst []byte, n uint64) []byte {
	dst = append(dst, "qnload-user-"...)
	return strconv.AppendUint(dst, n, 10)
}
