package client

import (
	"fmt"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// WaitWithin returns how long a call waits for toolgate's verdict when
// whoever waits on the caller gives up after timeout: wait, or when wait
// is 0 the most timeout allows, which is timeout less 10 seconds (less
// half of it, under 20), the time to withdraw the call and answer. A
// longer wait would have the caller give up before the call was
// withdrawn, so it is refused. whose names the timeout ("the hook's") and
// givesUp says what happens at it ("Claude Code stops waiting").
func WaitWithin(wait, timeout time.Duration, whose, givesUp string) (time.Duration, error) {
	if timeout <= 0 {
		return 0, fmt.Errorf("%w: timeout: must be > 0, got %s", machine.ErrInvalid, timeout)
	}
	margin := WaitMargin(timeout)
	most := timeout - margin
	switch {
	case wait < 0:
		return 0, fmt.Errorf("%w: wait: must be >= 0, got %s", machine.ErrInvalid, wait)
	case wait == 0:
		return most, nil
	case wait > most:
		return 0, fmt.Errorf("%w: wait: %s leaves no time to answer within %s timeout %s: at most %s (the timeout less %s, to withdraw the call and answer before %s)",
			machine.ErrInvalid, wait, whose, timeout, most, margin, givesUp)
	}
	return wait, nil
}

// WaitMargin is what a caller's timeout keeps back from the wait for
// withdrawing the call and answering: 10 seconds, or half a timeout
// shorter than 20.
func WaitMargin(timeout time.Duration) time.Duration { return min(10*time.Second, timeout/2) }
