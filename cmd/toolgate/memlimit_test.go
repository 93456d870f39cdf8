package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemoryLimit_Set(t *testing.T) {
	for in, want := range map[string]memoryLimit{
		"90%": {Percent: 90}, "12.5%": {Percent: 12.5}, "off": {}, "0": {},
		"900MiB": {Bytes: 900 << 20}, "2GiB": {Bytes: 2 << 30}, "1048576": {Bytes: 1 << 20}, "64KiB": {Bytes: 64 << 10},
	} {
		var l memoryLimit
		require.NoError(t, l.Set(in), in)
		assert.Equal(t, want, l, in)
	}
	for _, in := range []string{"", "0%", "101%", "-1", "1GB", "lots", "99999999TiB"} {
		var l memoryLimit
		assert.Error(t, l.Set(in), in)
	}
	l := defaultMemoryLimit
	assert.Equal(t, "90%", l.String())
}

func TestMemoryLimit_CgroupMax(t *testing.T) {
	root := func(t *testing.T, files map[string]string) string {
		dir := t.TempDir()
		for name, data := range files {
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
		}
		return dir
	}
	for name, tc := range map[string]struct {
		files map[string]string
		want  int64
	}{
		"v2, its own cgroup": {map[string]string{"proc/self/cgroup": "0::/toolgate.service\n",
			"sys/fs/cgroup/toolgate.service/memory.max": "1073741824\n", "sys/fs/cgroup/memory.max": "max\n"}, 1 << 30},
		"v2, a container's namespace":            {map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "536870912\n"}, 512 << 20},
		"v2, a path the container does not show": {map[string]string{"proc/self/cgroup": "0::/docker/abc\n", "sys/fs/cgroup/memory.max": "536870912\n"}, 512 << 20},
		"v2, no limit":                           {map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "max\n"}, 0},
		"v1": {map[string]string{"proc/self/cgroup": "4:cpu,cpuacct:/x\n3:memory:/x\n",
			"sys/fs/cgroup/memory/x/memory.limit_in_bytes": "268435456\n"}, 256 << 20},
		"v1, no limit": {map[string]string{"proc/self/cgroup": "3:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
		"no cgroup": {map[string]string{}, 0},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := cgroupMemoryMax(root(t, tc.files))
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.want != 0, ok)
		})
	}
}
