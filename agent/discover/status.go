package discover

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// ids is a process's identity from /proc/PID/status: the real,
// effective, saved and file-system uids and gids, and the supplementary
// groups. It is the tenant's own process, so every field is checked.
type ids struct {
	uids, gids [4]uint32
	groups     []uint32
}

// cred is the file-system identity that access checks use.
func (i ids) cred() cred {
	return cred{uid: i.uids[3], gids: append([]uint32{i.gids[3]}, i.groups...)}
}

// readIDs reads the Uid, Gid and Groups lines of dir/status.
func readIDs(dir string) (ids, error) {
	// Past its bound, Groups may be cut mid-number: no ids at all.
	b, err := readBounded(filepath.Join(dir, "status"), maxStatus)
	if err != nil {
		return ids{}, err
	}
	var out ids
	seen := 0
	for _, line := range strings.Split(string(b), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || (key != "Uid" && key != "Gid" && key != "Groups") {
			continue
		}
		var list []uint32
		for _, s := range strings.Fields(rest) {
			n, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return ids{}, fmt.Errorf("status: %s %q", key, s)
			}
			list = append(list, uint32(n))
		}
		switch key {
		case "Groups":
			out.groups = list
		default:
			if len(list) != 4 {
				return ids{}, fmt.Errorf("status: %s has %d fields", key, len(list))
			}
			if key == "Uid" {
				copy(out.uids[:], list)
			} else {
				copy(out.gids[:], list)
			}
			seen++
		}
	}
	if seen != 2 {
		return ids{}, errors.New("status: no Uid or Gid line")
	}
	return out, nil
}
