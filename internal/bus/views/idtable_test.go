package views

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The table finds what a map would, through adds and removes in any
// order (removals moving cells back across the table's end too).
func TestIDTable_AsAMap(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	tab := newIDTable()
	var calls []callSummary
	want := map[string]uint32{}
	for step := range 200_000 {
		id := fmt.Sprintf("c.%d", r.IntN(5000))
		if slot, ok := want[id]; ok && r.IntN(2) == 0 {
			tab.remove(calls, id)
			delete(want, id)
			calls[slot].id = "" // as compact clears a removed call's slot
		} else if !ok {
			slot := uint32(len(calls))
			calls = append(calls, callSummary{id: id})
			tab.add(calls, slot)
			want[id] = slot
		}
		if step%1000 == 0 || step == 199_999 {
			if tab.Len() != len(want) {
				t.Fatalf("step %d: %d ids, want %d", step, tab.Len(), len(want))
			}
			for id, slot := range want {
				if got, ok := tab.find(calls, id); !ok || got != slot {
					t.Fatalf("step %d: %s at %d, %v; want %d", step, id, got, ok, slot)
				}
			}
			for i := range 100 {
				if id := fmt.Sprintf("c.%d", 5000+i); func() bool { _, ok := tab.find(calls, id); return ok }() {
					t.Fatalf("finds %s, never added", id)
				}
			}
		}
	}
	if len(tab.cells) > 16<<10 {
		t.Fatalf("%d cells for at most 5000 ids", len(tab.cells))
	}
}

// A table that reserved room for n ids takes them without growing, and
// reserving again keeps what it holds.
func TestIDTable_Reserve(t *testing.T) {
	tab := newIDTable()
	var calls []callSummary
	add := func(n int) {
		for range n {
			slot := uint32(len(calls))
			calls = append(calls, callSummary{id: fmt.Sprintf("c.%d", slot)})
			tab.add(calls, slot)
		}
	}
	add(10)
	tab.reserve(calls, 10+1000)
	size := len(tab.cells)
	add(1000)
	if len(tab.cells) != size {
		t.Fatalf("grew from %d to %d cells adding the ids it had room for", size, len(tab.cells))
	}
	tab.reserve(calls, 10) // fewer than it holds: nothing moves
	if len(tab.cells) != size {
		t.Fatalf("%d cells after reserving less, had %d", len(tab.cells), size)
	}
	for i := range calls {
		if got, ok := tab.find(calls, calls[i].id); !ok || got != uint32(i) {
			t.Fatalf("%s at %d, %v; want %d", calls[i].id, got, ok, i)
		}
	}
}
