package collector

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// PartSuffix marks the file an agent is being written to. A file is
// renamed to drop the suffix once it is closed and complete, so a
// consumer that globs "*.pcapng" sees only finished files.
const PartSuffix = ".part"

// fileIface is one interface of an agent's output: its IDB and the
// last counters its agent reported for it.
type fileIface struct {
	ifc       wire.Interface
	stats     wire.IfaceStats
	haveStats bool
	statsTime int64
}

// agentFile is the pcapng output of one agent: the open file, if any,
// and the interfaces every new file starts with. File interface i is
// ifaces[i] in every file. Not safe for concurrent use; agent.mu guards it.
type agentFile struct {
	dir        string // Dir/<name>
	name, host string
	size       int64
	interval   time.Duration

	ifaces     []fileIface
	agentDrops uint64

	f        *os.File
	bw       *bufio.Writer
	w        *pcapfile.NgWriter
	path     string // final name, without PartSuffix
	rotateAt time.Time
}

// addIface returns the file index of ifc, adding an interface (and an
// IDB to the open file) if the agent never declared one like it.
func (af *agentFile) addIface(ifc wire.Interface) (int, error) {
	for i := range af.ifaces {
		if af.ifaces[i].ifc == ifc {
			return i, nil
		}
	}
	af.ifaces = append(af.ifaces, fileIface{ifc: ifc})
	if af.w != nil {
		if _, err := af.w.AddInterface(af.idb(len(af.ifaces) - 1)); err != nil {
			return 0, fmt.Errorf("writing interface block to %s: %w", af.path, err)
		}
	}
	return len(af.ifaces) - 1, nil
}

// idb names interface i after agent and interface, "web1:eth0", so a
// merged or tapped stream still says where each packet came from.
func (af *agentFile) idb(i int) pcapfile.Interface {
	ifc := af.ifaces[i].ifc
	return pcapfile.Interface{
		Name:        af.name + ":" + ifc.Name,
		Description: fmt.Sprintf("%s on host %s (pcapsync agent %s)", ifc.Name, af.host, af.name),
		LinkType:    ifc.LinkType,
		SnapLen:     ifc.SnapLen,
	}
}

// open starts a new file: section header and every known interface.
func (af *agentFile) open(now time.Time) error {
	if err := os.MkdirAll(af.dir, 0o750); err != nil {
		return fmt.Errorf("creating %s: %w", af.dir, err)
	}
	base := af.name + "_" + now.UTC().Format("20060102T150405.000") + "Z"
	path := filepath.Join(af.dir, base+".pcapng")
	// A name taken in the same millisecond gets _001, _002, ...: '_'
	// sorts after '.', so names sort in creation order.
	for n := 1; exists(path) || exists(path+PartSuffix); n++ {
		path = filepath.Join(af.dir, fmt.Sprintf("%s_%03d.pcapng", base, n))
	}
	f, err := os.OpenFile(path+PartSuffix, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("creating output file: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := pcapfile.NewNgWriter(bw, pcapfile.SectionInfo{
		OS:       "Linux",
		UserAppl: "pcapsync collector",
		Comment:  fmt.Sprintf("pcapsync agent %s on host %s", af.name, af.host),
	})
	for i := 0; err == nil && i < len(af.ifaces); i++ {
		_, err = w.AddInterface(af.idb(i))
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		f.Close()
		os.Remove(path + PartSuffix)
		return fmt.Errorf("writing headers of %s: %w", path, err)
	}
	af.f, af.bw, af.w, af.path = f, bw, w, path
	af.rotateAt = time.Time{}
	if af.interval > 0 {
		af.rotateAt = now.Truncate(af.interval).Add(af.interval)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// due reports whether the open file must be rotated before more is written.
func (af *agentFile) due(now time.Time) bool {
	return af.f != nil && (af.size > 0 && af.w.Written() >= af.size ||
		!af.rotateAt.IsZero() && !now.Before(af.rotateAt))
}

// writable makes sure a file is open and not due for rotation.
func (af *agentFile) writable(now time.Time) error {
	if af.due(now) {
		if err := af.close(now); err != nil {
			return err
		}
	}
	if af.f == nil {
		return af.open(now)
	}
	return nil
}

func (af *agentFile) write(ifIndex int, r *wire.Record) error {
	return af.w.WritePacket(ifIndex, r.Timestamp, r.OrigLen, r.Data)
}

// flush hands everything written so far to the OS.
func (af *agentFile) flush() error {
	if af.bw == nil {
		return nil
	}
	if err := af.bw.Flush(); err != nil {
		return fmt.Errorf("writing %s: %w", af.path+PartSuffix, err)
	}
	return nil
}

// close ends the open file, if any: an interface statistics block for
// every interface the agent reported counters for, then flush, close and
// rename to the final name.
func (af *agentFile) close(now time.Time) error {
	if af.f == nil {
		return nil
	}
	var err error
	for i := range af.ifaces {
		fi := &af.ifaces[i]
		if !fi.haveStats || err != nil {
			continue
		}
		err = af.w.WriteStats(i, pcapfile.InterfaceStats{
			Timestamp: fi.statsTime,
			IfRecv:    fi.stats.Received, HaveIfRecv: true,
			OsDrop: fi.stats.KernelDrops, HaveOsDrop: true,
			UsrDeliv: fi.stats.Captured, HaveUsrDeliv: true,
			Comment: fmt.Sprintf("counters since agent start; agent queue drops (all interfaces): %d; kernel queue freezes: %d",
				af.agentDrops, fi.stats.QueueFreezes),
		})
	}
	if err == nil {
		err = af.bw.Flush()
	}
	if cerr := af.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(af.path+PartSuffix, af.path)
	}
	af.f, af.bw, af.w = nil, nil, nil
	if err != nil {
		return fmt.Errorf("closing %s: %w", af.path, err)
	}
	return nil
}
