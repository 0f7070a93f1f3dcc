// What the agent remembers of formats between operations: those a crash
// left uncertain, and those refused after a failed mkfs.

package agent

import "sync"

// formatMemory is what the agent remembers of formats between
// operations: those a crash left uncertain (with the UUID each was
// making: a filesystem's, or a LUKS2 header's for an encrypt) and those
// refused after a failed mkfs.
type formatMemory struct {
	interrupted *interruptions // mkfs
	encrypting  *interruptions // luksFormat
	mu          sync.Mutex
	refused     map[string]refusedFormat
}

func newFormatMemory() *formatMemory {
	return &formatMemory{interrupted: newInterruptions(), encrypting: newInterruptions(), refused: map[string]refusedFormat{}}
}

// interruptions are, per volume, the UUID that a format a crash left
// uncertain was writing.
type interruptions struct {
	mu   sync.Mutex
	uuid map[string]string
}

func newInterruptions() *interruptions { return &interruptions{uuid: map[string]string{}} }

func (m *interruptions) set(name, uuid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.uuid[name] = uuid
}

// of returns the UUID of the volume's interrupted format, if one was.
func (m *interruptions) of(name string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	uuid, ok := m.uuid[name]
	return uuid, ok
}

func (m *interruptions) clear(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.uuid, name)
}

func (m *formatMemory) forgetRefused(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.refused, name)
}

func (m *formatMemory) refuse(name string, r refusedFormat) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refused[name] = r
}

// refusedFor returns the refusal kept for the volume and whether one was
// kept; a refusal made for another generation is forgotten as it is
// returned.
func (m *formatMemory) refusedFor(name, generation string) (refusedFormat, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.refused[name]
	if ok && r.generation != generation {
		delete(m.refused, name)
	}
	return r, ok
}
