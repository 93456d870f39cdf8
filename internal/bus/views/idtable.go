package views

import "hash/maphash"

// idTable finds a call's slot in the index by its id: a hash table of
// slots (open addressing, linear probing) that keeps no key of its own,
// the ids being in the summaries already. A cell is 4 bytes, at most
// three quarters full: 5 to 11 bytes a call, where a map[string]uint32
// took about 46 (a heap profile of a million calls).
type idTable struct {
	seed  maphash.Seed
	cells []uint32 // slot+1; 0: empty
	n     int
}

func newIDTable() idTable { return idTable{seed: maphash.MakeSeed()} }

// Len is how many ids the table holds.
func (t *idTable) Len() int { return t.n }

func (t *idTable) home(id string) int {
	return int(maphash.String(t.seed, id) & uint64(len(t.cells)-1))
}

// find returns the slot of id, and false when the table holds none.
func (t *idTable) find(calls []callSummary, id string) (uint32, bool) {
	i, ok := t.cell(calls, id)
	if !ok {
		return 0, false
	}
	return t.cells[i] - 1, true
}

// cell is the cell of id.
func (t *idTable) cell(calls []callSummary, id string) (int, bool) {
	if t.n == 0 {
		return 0, false
	}
	mask := len(t.cells) - 1
	for i := t.home(id); ; i = (i + 1) & mask {
		c := t.cells[i]
		if c == 0 {
			return 0, false
		}
		if calls[c-1].id == id {
			return i, true
		}
	}
}

// add records slot under its call's id, which the table does not hold.
func (t *idTable) add(calls []callSummary, slot uint32) {
	if (t.n+1)*4 > len(t.cells)*3 {
		t.resize(calls, max(64, 2*len(t.cells)))
	}
	t.put(calls[slot].id, slot)
	t.n++
}

func (t *idTable) put(id string, slot uint32) {
	mask := len(t.cells) - 1
	i := t.home(id)
	for t.cells[i] != 0 {
		i = (i + 1) & mask
	}
	t.cells[i] = slot + 1
}

// reserve makes room for n ids in all, so that adding them moves none.
func (t *idTable) reserve(calls []callSummary, n int) {
	size := max(64, len(t.cells))
	for n*4 > size*3 {
		size *= 2
	}
	if size > len(t.cells) {
		t.resize(calls, size)
	}
}

// resize moves the ids to a table of size cells, a power of two.
func (t *idTable) resize(calls []callSummary, size int) {
	old := t.cells
	t.cells = make([]uint32, size)
	for _, c := range old {
		if c != 0 {
			t.put(calls[c-1].id, c-1)
		}
	}
}

// remove forgets id: the cells after it that would no longer be found
// past the hole move back into it (linear probing's deletion, without
// tombstones).
func (t *idTable) remove(calls []callSummary, id string) {
	hole, ok := t.cell(calls, id)
	if !ok {
		return
	}
	t.cells[hole] = 0
	t.n--
	mask := len(t.cells) - 1
	for j := (hole + 1) & mask; t.cells[j] != 0; j = (j + 1) & mask {
		// The cell at j stays if its home is cyclically in (hole, j].
		home := t.home(calls[t.cells[j]-1].id)
		if (j-home)&mask < (j-hole)&mask {
			continue
		}
		t.cells[hole], t.cells[j] = t.cells[j], 0
		hole = j
	}
}
