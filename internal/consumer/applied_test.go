package consumer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/toolgate/toolgate/internal/consumer"
)

func TestApplied_HasAddRaise(t *testing.T) {
	var a consumer.Applied
	assert.False(t, a.Has(1))
	a.Add([][2]uint64{{5, 9}})
	assert.True(t, a.Has(5))
	assert.True(t, a.Has(9))
	assert.False(t, a.Has(4))
	assert.False(t, a.Has(10))
	a.Add([][2]uint64{{12, 14}, {10, 10}})
	assert.Equal(t, [][2]uint64{{5, 10}, {12, 14}}, a.Ranges)
	a.Raise(4)
	assert.Equal(t, consumer.Applied{Floor: 10, Ranges: [][2]uint64{{12, 14}}}, a, "a range that reaches the floor folds into it")
	a.Raise(11)
	assert.Equal(t, consumer.Applied{Floor: 14}, a)
	a.Add([][2]uint64{{3, 20}})
	assert.Equal(t, consumer.Applied{Floor: 20}, a)
	a.Raise(2)
	assert.Equal(t, uint64(20), a.Floor, "the floor never goes down")
}

func TestSeqRanges(t *testing.T) {
	assert.Equal(t, [][2]uint64{{1, 3}, {7, 7}, {9, 10}}, consumer.SeqRanges([]uint64{9, 2, 1, 3, 10, 7, 2}))
	assert.Nil(t, consumer.SeqRanges(nil))
}
