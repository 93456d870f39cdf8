package policy_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/toolgate/toolgate/policy"
)

func TestMicros_SumsAreExact(t *testing.T) {
	t.Parallel()
	var sum policy.Micros
	for range 13 {
		sum = sum.Plus(policy.MicrosOf(0.01))
	}
	assert.Equal(t, "0.13", sum.String())
	assert.Equal(t, 0.13, sum.Float64())
	two := policy.MicrosOf(0.07).Plus(policy.MicrosOf(0.06))
	assert.Equal(t, policy.Micros(130_000), two)
	assert.Equal(t, "0.13", two.String())
	assert.Equal(t, "0.3", policy.MicrosOf(0.1).Plus(policy.MicrosOf(0.2)).String())
}

func TestMicros_String(t *testing.T) {
	t.Parallel()
	for m, want := range map[policy.Micros]string{
		0: "0", 1: "0.000001", 500_000: "0.5", 2_000_000: "2", 1_234_567: "1.234567",
		-1_500_000: "-1.5", policy.MaxMicros: "9223372036854.775807", -policy.MaxMicros - 1: "-9223372036854.775808",
	} {
		assert.Equal(t, want, m.String(), "%d", int64(m))
	}
}

func TestMicrosOf_RoundsAndHolds(t *testing.T) {
	t.Parallel()
	assert.Equal(t, policy.Micros(1), policy.MicrosOf(0.0000009), "rounded to the nearest millionth")
	assert.Equal(t, policy.Micros(0), policy.MicrosOf(0.0000004))
	assert.Equal(t, policy.MaxMicros, policy.MicrosOf(1e300), "held at the most a Micros holds")
	assert.Equal(t, policy.MaxMicros, policy.MicrosOf(math.Inf(1)))
	assert.Equal(t, -policy.MaxMicros, policy.MicrosOf(-1e300))
	assert.Equal(t, policy.Micros(0), policy.MicrosOf(math.NaN()))
	assert.Equal(t, policy.MaxMicros, policy.MaxMicros.Plus(1), "a sum never wraps around")
	assert.Equal(t, -policy.MaxMicros, (-policy.MaxMicros).Plus(-5))
	assert.Equal(t, policy.Micros(3), policy.Micros(5).Plus(-2))
}
