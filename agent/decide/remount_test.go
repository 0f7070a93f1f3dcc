package decide

import (
	"reflect"
	"testing"

	"github.com/volumed/volumed/store/record"
)

func TestPlanRemountsChangedOptions(t *testing.T) {
	base := loopWant(tgt("/t", false))
	edited := func(edit func(d *Desired)) *Desired {
		d := loopWant(tgt("/t", false))
		fs := *d.Spec.Filesystem
		d.Spec.Filesystem = &fs
		edit(d)
		return d
	}
	noatime := edited(func(d *Desired) { d.Spec.Filesystem.MountOptions = []string{"noatime"} })
	suid := edited(func(d *Desired) { d.Spec.Filesystem.AllowSuid = true })
	ro := edited(func(d *Desired) { d.Targets[0].ReadOnly = true })

	refused := madeWith(base)
	refused.Staging.Refused = &record.Refusal{Options: StagingOptions(noatime), Error: "invalid argument"}
	legacy := madeWith(base)
	legacy.Staging.Options, legacy.Targets[0].Options = nil, nil
	legacyTarget := madeWith(base)
	legacyTarget.Targets[0].Options = nil
	stagingDone := madeWith(suid)
	stagingDone.Targets = madeWith(base).Targets

	cases := []struct {
		name string
		d    *Desired
		rec  *record.Volume
		want []Op
	}{
		{"as made: nothing", base, madeWith(base), nil},
		{"mountOptions edited: the staging mount", noatime, madeWith(base), []Op{{Volume: "a", Name: OpRemount}}},
		{"allowSuid edited: staging first", suid, madeWith(base), []Op{{Volume: "a", Name: OpRemount}}},
		{"allowSuid edited, staging done: then the target", suid, stagingDone, []Op{{Volume: "a", Name: OpRemount, Target: suid.Targets[0]}}},
		{"readOnly edited: the target alone", ro, madeWith(base), []Op{{Volume: "a", Name: OpRemount, Target: ro.Targets[0]}}},
		{"a refused remount is not tried again for the same options", noatime, refused, nil},
		{"a refused remount is tried for other options", suid, refused, []Op{{Volume: "a", Name: OpRemount}}},
		{"a mount of unknown options is remounted to the manifest's", base, legacy, []Op{{Volume: "a", Name: OpRemount}}},
		{"a target of unknown options too", base, legacyTarget, []Op{{Volume: "a", Name: OpRemount, Target: base.Targets[0]}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Plan(map[string]*Desired{"a": c.d}, map[string]*record.Volume{"a": c.rec})
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Plan:\n got  %+v\n want %+v", got, c.want)
			}
		})
	}
}
