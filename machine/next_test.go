package machine_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/toolgate/toolgate/machine"
)

// Next answers from the one table: an event follows a state exactly when
// the machine would fire it, and leads to its target.
func TestNext_AnswersFromTheTable(t *testing.T) {
	t.Parallel()
	for _, from := range append([]machine.State{""}, machine.States...) {
		for _, ev := range machine.Events() {
			to, ok := from.Next(ev)
			assert.Equal(t, machine.CanFire(from, ev), ok, "%q %s", from, ev)
			if ok {
				target, _ := ev.Target()
				assert.Equal(t, target, to, "%q %s", from, ev)
			}
		}
	}
	_, ok := machine.StatePendingApproval.Next("bogus")
	assert.False(t, ok)
}
