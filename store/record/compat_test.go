package record

import (
	"encoding/json"
	"strings"
	"testing"
)

// A state file written before the fields were named Kind keeps its
// "driver" keys, and is read the same.
func TestKindKeepsTheStateFilesKey(t *testing.T) {
	old := `{"name":"a","driver":"loop","attachment":{"driver":"loop","device":"/dev/loop0","identity":"loop:/i@1:2"}}`
	var v Volume
	if err := json.Unmarshal([]byte(old), &v); err != nil {
		t.Fatal(err)
	}
	if v.Kind != "loop" || v.Attachment == nil || v.Attachment.Kind != "loop" {
		t.Fatalf("an older record read as %+v (attachment %+v)", v, v.Attachment)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(out), `"driver":"loop"`) != 2 {
		t.Errorf("written as %s: an older volumed would not read its kind", out)
	}
}
