package policy

import (
	"math"
	"strconv"
)

// Micros is an amount of money in millionths of its currency. Costs cross
// the wire as JSON numbers, but every sum toolgate keeps of them (the
// budget ledger, the analytics, a dry run's totals) is of Micros, so that
// 0.07 + 0.06 is 0.13 and not 0.13000000000000003, and a limit is met or
// passed exactly.
type Micros int64

// MaxMicros is the most a Micros holds, about 9.2e12 of the currency. Sums
// stop there rather than wrap around to a negative amount, which a limit
// would then let through.
const MaxMicros = Micros(math.MaxInt64)

// MicrosOf is x (in the currency) rounded to the nearest millionth. An x
// too large for Micros is MaxMicros, one too small -MaxMicros; NaN is 0
// (the edges refuse a cost that is not a finite number >= 0 before any
// is summed).
func MicrosOf(x float64) Micros {
	m := math.Round(x * 1e6)
	switch {
	case math.IsNaN(m):
		return 0
	case m >= math.MaxInt64:
		return MaxMicros
	case m <= -math.MaxInt64:
		return -MaxMicros
	}
	return Micros(m)
}

// Plus is m + n, held within ±MaxMicros.
func (m Micros) Plus(n Micros) Micros {
	s := m + n
	switch {
	case n > 0 && s < m:
		return MaxMicros
	case n < 0 && s > m:
		return -MaxMicros
	}
	return max(s, -MaxMicros)
}

// Float64 is m in the currency, as the wire carries it: the float64
// nearest to the decimal m stands for, which JSON encodes as that decimal.
func (m Micros) Float64() float64 { return float64(m) / 1e6 }

// String is m in the currency as a decimal, exactly, with no trailing
// zeros: 0.13, 2, -1.5.
func (m Micros) String() string {
	neg := m < 0
	u := uint64(m)
	if neg {
		u = -u
	}
	s := strconv.FormatUint(u/1e6, 10)
	if frac := u % 1e6; frac != 0 {
		f := strconv.FormatUint(frac+1e6, 10)[1:] // six digits, leading zeros kept
		for f[len(f)-1] == '0' {
			f = f[:len(f)-1]
		}
		s += "." + f
	}
	if neg {
		s = "-" + s
	}
	return s
}
