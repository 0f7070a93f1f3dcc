package ostest

import "fmt"

// loopManifest is a 64 MiB loop image in /var/lib/ostest, ext4, mounted
// at mnt.
func loopManifest(name, mnt string) string {
	return fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: %s}
spec:
  source:
    loop: {file: /var/lib/ostest/%s.img, create: {size: 64Mi}}
  filesystem: {type: ext4}
  mounts: [{path: %s}]
`, name, name, mnt)
}
