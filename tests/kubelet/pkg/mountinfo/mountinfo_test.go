package mountinfo

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseUnescapesPathsAndSkipsOptionalFields(t *testing.T) {
	table := "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n" +
		"95 22 0:50 /vol\\040a /tmp/k/pods/u/volumes/x\\040y/mount rw master:3 shared:9 - tmpfs tmp\\134fs rw\n" +
		"96 22 7:0 / /tmp/k/dev rw - ext4 /dev/loop0 rw\n"
	got, err := Parse(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{Point: "/", Root: "/", FSType: "ext4", Source: "/dev/sda1"},
		{Point: "/tmp/k/pods/u/volumes/x y/mount", Root: "/vol a", FSType: "tmpfs", Source: `tmp\fs`},
		{Point: "/tmp/k/dev", Root: "/", FSType: "ext4", Source: "/dev/loop0"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseRefusesWhatIsNotAMountTable(t *testing.T) {
	for name, table := range map[string]string{
		"empty":           "",
		"no separator":    "22 1 8:1 / / rw,relatime shared:1 ext4 /dev/sda1 rw\n",
		"short":           "22 1 8:1 / /\n",
		"a bad escape":    "22 1 8:1 / /a\\09 rw - ext4 /dev/sda1 rw\n",
		"a cut escape":    "22 1 8:1 / /a\\04 rw - ext4 /dev/sda1 rw\n",
		"no source after": "22 1 8:1 / / rw - ext4\n",
	} {
		if got, err := Parse(strings.NewReader(table)); err == nil {
			t.Errorf("%s: Parse = %+v, want an error", name, got)
		}
	}
}

func TestReadFindsTheRootFilesystem(t *testing.T) {
	ok, err := IsMountPoint("/")
	if err != nil || !ok {
		t.Fatalf("IsMountPoint(/) = %v, %v; want true", ok, err)
	}
	if ok, err := IsMountPoint("/proc/self"); err != nil || ok {
		t.Errorf("IsMountPoint(/proc/self) = %v, %v; want false", ok, err)
	}
}
