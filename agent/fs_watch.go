package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// watchEvent is one line of `fs watch`: the box filesystem's event (src/sandbox/box-fs.ts).
type watchEvent struct {
	Type  string `json:"type"`
	Name  string `json:"name"`
	IsDir bool   `json:"isDir,omitempty"`
}

const watchMask = syscall.IN_CREATE | syscall.IN_MODIFY | syscall.IN_ATTRIB | syscall.IN_DELETE |
	syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF

// watcher follows one path (and, recursive, every directory below it) through one inotify fd.
type watcher struct {
	fd        int
	root      string
	recursive bool
	// dirs: watch descriptor -> the directory's name relative to root ("" for root itself).
	dirs   map[int32]string
	rootWd int32
	// tempMoves: cookies of `fs write` temp files renamed away; their arrival is the write.
	tempMoves map[uint32]bool
	out       *bufio.Writer
}

// fsWatch prints {"type":"ready"} once the watches are in place, then one JSON line per event,
// names relative to path, until it is killed or path itself goes away.
func fsWatch(path string, recursive bool, stdout io.Writer) error {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		return toFsError(err, "watch", path)
	}
	defer syscall.Close(fd)
	w := &watcher{fd: fd, root: path, recursive: recursive, dirs: map[int32]string{}, tempMoves: map[uint32]bool{}, out: bufio.NewWriter(stdout)}
	wd, err := syscall.InotifyAddWatch(fd, path, watchMask)
	if err != nil {
		return toFsError(err, "watch", path)
	}
	w.rootWd = int32(wd)
	w.dirs[w.rootWd] = ""
	if fi, err := os.Stat(path); err == nil && fi.IsDir() && recursive {
		w.addTree("", false)
	}
	if err := writeJSON(w.out, map[string]string{"type": "ready"}); err != nil {
		return err
	}
	if err := w.out.Flush(); err != nil {
		return err
	}
	return w.loop()
}

// addTree watches every directory below rel (not following symlinks); with announce it also
// reports what is already inside as created: a directory made a moment ago may have been filled
// before its watch was added.
func (w *watcher) addTree(rel string, announce bool) {
	list, err := os.ReadDir(filepath.Join(w.root, rel))
	if err != nil {
		return
	}
	for _, d := range list {
		name := joinRel(rel, d.Name())
		if announce && !isTemp(d.Name()) {
			w.emit(watchEvent{Type: "create", Name: name, IsDir: d.IsDir()})
		}
		if d.IsDir() {
			wd, err := syscall.InotifyAddWatch(w.fd, filepath.Join(w.root, name), watchMask|syscall.IN_DONT_FOLLOW|syscall.IN_ONLYDIR)
			if err != nil {
				continue
			}
			w.dirs[int32(wd)] = name
			w.addTree(name, announce)
		}
	}
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func isTemp(name string) bool {
	return len(name) >= len(tempPrefix) && name[:len(tempPrefix)] == tempPrefix
}

func (w *watcher) emit(e watchEvent) { _ = writeJSON(w.out, e) }

func (w *watcher) loop() error {
	buf := make([]byte, 64*1024)
	for {
		n, err := syscall.Read(w.fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return toFsError(err, "watch", w.root)
		}
		if done := w.handle(buf[:n]); done {
			return w.out.Flush()
		}
		// A reader that went away ends the watch (EPIPE).
		if err := w.out.Flush(); err != nil {
			return nil
		}
	}
}

// handle reports one read's events; true when the watched path itself is gone.
func (w *watcher) handle(b []byte) bool {
	var last watchEvent
	for len(b) >= syscall.SizeofInotifyEvent {
		wd := int32(binary.LittleEndian.Uint32(b[0:4]))
		mask := binary.LittleEndian.Uint32(b[4:8])
		cookie := binary.LittleEndian.Uint32(b[8:12])
		nameLen := int(binary.LittleEndian.Uint32(b[12:16]))
		end := syscall.SizeofInotifyEvent + nameLen
		if end > len(b) {
			break
		}
		raw := b[syscall.SizeofInotifyEvent:end]
		b = b[end:]
		if i := bytes.IndexByte(raw, 0); i >= 0 {
			raw = raw[:i]
		}
		base := string(raw)
		dir, known := w.dirs[wd]
		if mask&syscall.IN_IGNORED != 0 {
			delete(w.dirs, wd)
			if wd == w.rootWd {
				return true
			}
			continue
		}
		if !known {
			continue
		}
		isDir := mask&syscall.IN_ISDIR != 0
		name := dir
		if base != "" {
			name = joinRel(dir, base)
		}
		var events []watchEvent
		switch {
		case mask&(syscall.IN_DELETE_SELF|syscall.IN_MOVE_SELF) != 0:
			// A subdirectory's own end is reported by its parent; only the root's is news.
			if wd == w.rootWd {
				typ := "remove"
				if mask&syscall.IN_MOVE_SELF != 0 {
					typ = "rename"
				}
				events = append(events, watchEvent{Type: typ, Name: "", IsDir: isDir})
			}
		case isTemp(base):
			// `fs write`'s temp file: its creation and writes are noise; its rename into place
			// is the write of the real name.
			if mask&syscall.IN_MOVED_FROM != 0 {
				w.tempMoves[cookie] = true
			}
		case mask&syscall.IN_MOVED_TO != 0 && w.tempMoves[cookie]:
			delete(w.tempMoves, cookie)
			events = append(events, watchEvent{Type: "create", Name: name}, watchEvent{Type: "write", Name: name})
		case mask&(syscall.IN_CREATE|syscall.IN_MOVED_TO) != 0:
			events = append(events, watchEvent{Type: "create", Name: name, IsDir: isDir})
			if isDir && w.recursive {
				full := filepath.Join(w.root, name)
				if nwd, err := syscall.InotifyAddWatch(w.fd, full, watchMask|syscall.IN_DONT_FOLLOW|syscall.IN_ONLYDIR); err == nil {
					w.dirs[int32(nwd)] = name
					for _, e := range events {
						w.emit(e)
					}
					events = nil
					w.addTree(name, true)
				}
			}
		case mask&syscall.IN_MODIFY != 0:
			events = append(events, watchEvent{Type: "write", Name: name, IsDir: isDir})
		case mask&syscall.IN_ATTRIB != 0:
			events = append(events, watchEvent{Type: "chmod", Name: name, IsDir: isDir})
		case mask&syscall.IN_DELETE != 0:
			events = append(events, watchEvent{Type: "remove", Name: name, IsDir: isDir})
		case mask&syscall.IN_MOVED_FROM != 0:
			events = append(events, watchEvent{Type: "rename", Name: name, IsDir: isDir})
		}
		for _, e := range events {
			// A write(2) loop makes one IN_MODIFY per call: one event per run of them.
			if e == last && e.Type == "write" {
				continue
			}
			w.emit(e)
			last = e
		}
	}
	return false
}
