package packaging_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/volumed/volumed/agent/csi"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/kinds"
)

// The Kubernetes objects under kubernetes/ are decoded strictly into
// local types that list every field they use (k8s.io/api would cost
// this module a dependency tree for one test): a misspelt or misplaced
// field fails here, as the API server would refuse it.

type k8sMeta struct {
	Name      string            `yaml:"name"`
	Namespace string            `yaml:"namespace"`
	Labels    map[string]string `yaml:"labels"`
}

type k8sHeader struct {
	APIVersion string  `yaml:"apiVersion"`
	Kind       string  `yaml:"kind"`
	Metadata   k8sMeta `yaml:"metadata"`
}

type csiDriver struct {
	k8sHeader `yaml:",inline"`
	Spec      struct {
		AttachRequired       *bool    `yaml:"attachRequired"`
		PodInfoOnMount       bool     `yaml:"podInfoOnMount"`
		FSGroupPolicy        string   `yaml:"fsGroupPolicy"`
		RequiresRepublish    bool     `yaml:"requiresRepublish"`
		StorageCapacity      bool     `yaml:"storageCapacity"`
		VolumeLifecycleModes []string `yaml:"volumeLifecycleModes"`
	} `yaml:"spec"`
}

type storageClass struct {
	k8sHeader            `yaml:",inline"`
	Provisioner          string            `yaml:"provisioner"`
	VolumeBindingMode    string            `yaml:"volumeBindingMode"`
	AllowVolumeExpansion bool              `yaml:"allowVolumeExpansion"`
	ReclaimPolicy        string            `yaml:"reclaimPolicy"`
	Parameters           map[string]string `yaml:"parameters"`
}

type volumeSnapshotClass struct {
	k8sHeader      `yaml:",inline"`
	Driver         string `yaml:"driver"`
	DeletionPolicy string `yaml:"deletionPolicy"`
}

type serviceAccount struct {
	k8sHeader `yaml:",inline"`
}

// role is a ClusterRole or a Role.
type role struct {
	k8sHeader `yaml:",inline"`
	Rules     []struct {
		APIGroups []string `yaml:"apiGroups"`
		Resources []string `yaml:"resources"`
		Verbs     []string `yaml:"verbs"`
	} `yaml:"rules"`
}

// binding is a ClusterRoleBinding or a RoleBinding.
type binding struct {
	k8sHeader `yaml:",inline"`
	RoleRef   struct {
		APIGroup string `yaml:"apiGroup"`
		Kind     string `yaml:"kind"`
		Name     string `yaml:"name"`
	} `yaml:"roleRef"`
	Subjects []struct {
		Kind      string `yaml:"kind"`
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"subjects"`
}

type volumeMount struct {
	Name             string `yaml:"name"`
	MountPath        string `yaml:"mountPath"`
	MountPropagation string `yaml:"mountPropagation"`
	ReadOnly         bool   `yaml:"readOnly"`
}

type container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Env   []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	SecurityContext struct {
		Privileged bool `yaml:"privileged"`
	} `yaml:"securityContext"`
	VolumeMounts []volumeMount `yaml:"volumeMounts"`
}

type daemonSet struct {
	k8sHeader `yaml:",inline"`
	Spec      struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		UpdateStrategy struct {
			Type          string `yaml:"type"`
			RollingUpdate struct {
				MaxUnavailable int `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"updateStrategy"`
		Template struct {
			Metadata k8sMeta `yaml:"metadata"`
			Spec     struct {
				PriorityClassName             string `yaml:"priorityClassName"`
				ServiceAccountName            string `yaml:"serviceAccountName"`
				HostNetwork                   bool   `yaml:"hostNetwork"`
				HostPID                       bool   `yaml:"hostPID"`
				DNSPolicy                     string `yaml:"dnsPolicy"`
				TerminationGracePeriodSeconds int    `yaml:"terminationGracePeriodSeconds"`
				Tolerations                   []struct {
					Operator string `yaml:"operator"`
				} `yaml:"tolerations"`
				Containers []container `yaml:"containers"`
				Volumes    []struct {
					Name     string `yaml:"name"`
					HostPath struct {
						Path string `yaml:"path"`
						Type string `yaml:"type"`
					} `yaml:"hostPath"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type persistentVolume struct {
	k8sHeader `yaml:",inline"`
	Spec      struct {
		Capacity                      map[string]string `yaml:"capacity"`
		AccessModes                   []string          `yaml:"accessModes"`
		PersistentVolumeReclaimPolicy string            `yaml:"persistentVolumeReclaimPolicy"`
		StorageClassName              string            `yaml:"storageClassName"`
		VolumeMode                    string            `yaml:"volumeMode"`
		CSI                           struct {
			Driver             string            `yaml:"driver"`
			VolumeHandle       string            `yaml:"volumeHandle"`
			FSType             string            `yaml:"fsType"`
			VolumeAttributes   map[string]string `yaml:"volumeAttributes"`
			NodeStageSecretRef *struct {
				Name      string `yaml:"name"`
				Namespace string `yaml:"namespace"`
			} `yaml:"nodeStageSecretRef"`
		} `yaml:"csi"`
		NodeAffinity struct {
			Required struct {
				NodeSelectorTerms []struct {
					MatchExpressions []struct {
						Key      string   `yaml:"key"`
						Operator string   `yaml:"operator"`
						Values   []string `yaml:"values"`
					} `yaml:"matchExpressions"`
				} `yaml:"nodeSelectorTerms"`
			} `yaml:"required"`
		} `yaml:"nodeAffinity"`
	} `yaml:"spec"`
}

type persistentVolumeClaim struct {
	k8sHeader `yaml:",inline"`
	Spec      struct {
		StorageClassName string   `yaml:"storageClassName"`
		VolumeName       string   `yaml:"volumeName"`
		VolumeMode       string   `yaml:"volumeMode"`
		AccessModes      []string `yaml:"accessModes"`
		Resources        struct {
			Requests map[string]string `yaml:"requests"`
		} `yaml:"resources"`
	} `yaml:"spec"`
}

type secret struct {
	k8sHeader  `yaml:",inline"`
	Type       string            `yaml:"type"`
	StringData map[string]string `yaml:"stringData"`
}

// k8sObjects decodes every document of every file under kubernetes/.
func k8sObjects(t *testing.T) []any {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Kubernetes objects (%v)", err)
	}
	var out []any
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs := bytes.Split(data, []byte("\n---\n"))
		for i, doc := range docs {
			var h k8sHeader
			if err := yaml.Unmarshal(doc, &h); err != nil {
				t.Fatalf("%s document %d: %v", f, i+1, err)
			}
			var obj any
			want := map[string]string{
				"CSIDriver": "storage.k8s.io/v1", "StorageClass": "storage.k8s.io/v1", "DaemonSet": "apps/v1",
				"PersistentVolume": "v1", "PersistentVolumeClaim": "v1", "Secret": "v1", "ServiceAccount": "v1",
				"VolumeSnapshotClass": "snapshot.storage.k8s.io/v1",
				"ClusterRole":         "rbac.authorization.k8s.io/v1", "Role": "rbac.authorization.k8s.io/v1",
				"ClusterRoleBinding": "rbac.authorization.k8s.io/v1", "RoleBinding": "rbac.authorization.k8s.io/v1",
			}[h.Kind]
			switch h.Kind {
			case "CSIDriver":
				obj = &csiDriver{}
			case "StorageClass":
				obj = &storageClass{}
			case "DaemonSet":
				obj = &daemonSet{}
			case "PersistentVolume":
				obj = &persistentVolume{}
			case "PersistentVolumeClaim":
				obj = &persistentVolumeClaim{}
			case "Secret":
				obj = &secret{}
			case "ServiceAccount":
				obj = &serviceAccount{}
			case "VolumeSnapshotClass":
				obj = &volumeSnapshotClass{}
			case "ClusterRole", "Role":
				obj = &role{}
			case "ClusterRoleBinding", "RoleBinding":
				obj = &binding{}
			default:
				t.Fatalf("%s document %d: kind %q is not checked here", f, i+1, h.Kind)
			}
			if h.APIVersion != want {
				t.Errorf("%s %s: apiVersion %q, want %q", f, h.Kind, h.APIVersion, want)
			}
			dec := yaml.NewDecoder(bytes.NewReader(doc))
			dec.KnownFields(true)
			if err := dec.Decode(obj); err != nil && !errors.Is(err, io.EOF) {
				t.Errorf("%s %s %s: %v", f, h.Kind, h.Metadata.Name, err)
			}
			out = append(out, obj)
		}
	}
	return out
}

func TestKubernetesObjects(t *testing.T) {
	opts := manifest.Options{StateDir: "/var/lib/volumed", Kinds: kinds.Manifest(kinds.All())}
	secrets := map[string][]string{}
	rules := map[string]*role{}
	var bindings []*binding
	var pvs []*persistentVolume
	kinds := map[string]int{}
	for _, o := range k8sObjects(t) {
		switch o := o.(type) {
		case *csiDriver:
			kinds["CSIDriver"]++
			if o.Metadata.Name != csi.DriverName || o.Spec.AttachRequired == nil || *o.Spec.AttachRequired {
				t.Errorf("CSIDriver %s: want %s with attachRequired: false (volumed attaches at stage)", o.Metadata.Name, csi.DriverName)
			}
			if !o.Spec.StorageCapacity {
				t.Errorf("CSIDriver %s: storageCapacity: false, so the scheduler ignores the pools' capacity", o.Metadata.Name)
			}
		case *storageClass:
			kinds["StorageClass"]++
			if o.VolumeBindingMode != "WaitForFirstConsumer" {
				t.Errorf("StorageClass %s: volumeBindingMode %q: a node-local volume binds once its node is known", o.Metadata.Name, o.VolumeBindingMode)
			}
			if o.Provisioner == csi.DriverName {
				kinds["provisioned StorageClass"]++
				// What CreateVolume and the first stage will make of it.
				if err := csi.CheckParameters(o.Parameters, opts); err != nil {
					t.Errorf("StorageClass %s: %v", o.Metadata.Name, err)
				}
			}
		case *volumeSnapshotClass:
			kinds["VolumeSnapshotClass"]++
			if o.Driver != csi.DriverName {
				t.Errorf("VolumeSnapshotClass %s: driver %q, want %s", o.Metadata.Name, o.Driver, csi.DriverName)
			}
		case *role:
			rules[o.Kind+"/"+o.Metadata.Name] = o
		case *binding:
			bindings = append(bindings, o)
		case *daemonSet:
			kinds["DaemonSet"]++
			checkDaemonSet(t, o)
		case *persistentVolume:
			kinds["PersistentVolume"]++
			pvs = append(pvs, o)
		case *persistentVolumeClaim:
			kinds["PersistentVolumeClaim"]++
		case *secret:
			for k := range o.StringData {
				secrets[o.Metadata.Namespace+"/"+o.Metadata.Name] = append(secrets[o.Metadata.Namespace+"/"+o.Metadata.Name], k)
			}
		}
	}
	checkProvisionerAccess(t, rules, bindings)
	for _, k := range []string{"CSIDriver", "StorageClass", "DaemonSet", "PersistentVolume", "PersistentVolumeClaim", "provisioned StorageClass", "VolumeSnapshotClass"} {
		if kinds[k] == 0 {
			t.Errorf("no %s under kubernetes/", k)
		}
	}
	for _, pv := range pvs {
		c := pv.Spec.CSI
		if c.Driver != csi.DriverName {
			t.Errorf("PV %s: driver %q, want %s", pv.Metadata.Name, c.Driver, csi.DriverName)
		}
		var keys []string
		if ref := c.NodeStageSecretRef; ref != nil {
			var ok bool
			if keys, ok = secrets[ref.Namespace+"/"+ref.Name]; !ok {
				t.Errorf("PV %s: its stage secret %s/%s is not shipped beside it", pv.Metadata.Name, ref.Namespace, ref.Name)
			}
		}
		// What NodeStageVolume will make of it, with the real kinds.
		if err := csi.CheckVolume(c.VolumeHandle, c.VolumeAttributes, keys, c.FSType, pv.Spec.VolumeMode == "Block", opts); err != nil {
			t.Errorf("PV %s: %v", pv.Metadata.Name, err)
		}
		for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
			for _, e := range term.MatchExpressions {
				if e.Key != csi.TopologyKey {
					t.Errorf("PV %s: node affinity on %q, want the key the plugin reports, %s", pv.Metadata.Name, e.Key, csi.TopologyKey)
				}
			}
		}
	}
}

func checkDaemonSet(t *testing.T, ds *daemonSet) {
	t.Helper()
	pod := ds.Spec.Template.Spec
	if pod.HostPID {
		t.Errorf("DaemonSet: hostPID is not needed")
	}
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		hostPaths[v.Name] = v.HostPath.Path
	}
	byName := map[string]container{}
	for _, c := range pod.Containers {
		byName[c.Name] = c
		for _, m := range c.VolumeMounts {
			if _, ok := hostPaths[m.Name]; !ok {
				t.Errorf("container %s mounts volume %q, which the pod does not declare", c.Name, m.Name)
			}
			if !slices.Contains([]string{"", "None", "HostToContainer", "Bidirectional"}, m.MountPropagation) {
				t.Errorf("container %s mount %s: mountPropagation %q", c.Name, m.Name, m.MountPropagation)
			}
		}
	}
	v, ok := byName["volumed"]
	if !ok {
		t.Fatal("DaemonSet: no volumed container")
	}
	if !v.SecurityContext.Privileged {
		t.Error("volumed container: not privileged")
	}
	kubelet := false
	for _, m := range v.VolumeMounts {
		if hostPaths[m.Name] == "/var/lib/kubelet" {
			kubelet = m.MountPropagation == "Bidirectional" && m.MountPath == "/var/lib/kubelet"
		}
	}
	if !kubelet {
		t.Error("volumed container: /var/lib/kubelet must be mounted at the same path with Bidirectional propagation")
	}
	endpoint := ""
	for _, a := range v.Args {
		if e, ok := strings.CutPrefix(a, "--csi-endpoint="); ok {
			endpoint = e
		}
	}
	checkSidecars(t, pod.ServiceAccountName, v, byName)
	reg, ok := byName["node-driver-registrar"]
	if !ok {
		t.Fatal("DaemonSet: no node-driver-registrar sidecar")
	}
	var address, regPath string
	for _, a := range reg.Args {
		if s, ok := strings.CutPrefix(a, "--csi-address="); ok {
			address = s
		}
		if s, ok := strings.CutPrefix(a, "--kubelet-registration-path="); ok {
			regPath = s
		}
	}
	if endpoint != "unix://"+address {
		t.Errorf("volumed serves %q, the registrar dials %q", endpoint, address)
	}
	// The socket the registrar names to the kubelet is the one volumed
	// serves, seen from the host.
	for _, m := range v.VolumeMounts {
		if strings.HasPrefix(address, m.MountPath+"/") {
			if host := filepath.Join(hostPaths[m.Name], strings.TrimPrefix(address, m.MountPath)); host != regPath {
				t.Errorf("the kubelet is told %s, volumed's socket is %s on the host", regPath, host)
			}
		}
	}
}

// checkProvisionerAccess: the DaemonSet's account is bound to roles that
// let its provisioner create PVs and publish capacity.
func checkProvisionerAccess(t *testing.T, rules map[string]*role, bindings []*binding) {
	t.Helper()
	may := map[string]bool{}
	for _, b := range bindings {
		r := rules[b.RoleRef.Kind+"/"+b.RoleRef.Name]
		if r == nil {
			t.Errorf("%s %s: binds %s %s, which is not shipped", b.Kind, b.Metadata.Name, b.RoleRef.Kind, b.RoleRef.Name)
			continue
		}
		for _, sub := range b.Subjects {
			if sub.Kind != "ServiceAccount" || sub.Name != "volumed-node" {
				continue
			}
			for _, rule := range r.Rules {
				for _, res := range rule.Resources {
					for _, v := range rule.Verbs {
						may[res+":"+v] = true
					}
				}
			}
		}
	}
	for _, need := range []string{"persistentvolumes:create", "persistentvolumes:delete", "persistentvolumeclaims:update",
		"csistoragecapacities:create", "csistoragecapacities:delete", "persistentvolumeclaims/status:patch", "volumesnapshotcontents:update"} {
		if !may[need] {
			t.Errorf("the account volumed-node may not %s", need)
		}
	}
}

// checkSidecars: a volumed with a pool has the provisioner in its
// distributed mode, with capacity, the node's name and its owner's.
func checkSidecars(t *testing.T, account string, v container, byName map[string]container) {
	t.Helper()
	if !slices.ContainsFunc(v.Args, func(a string) bool {
		return strings.HasPrefix(a, "--csi-loop-pool=") || strings.HasPrefix(a, "--csi-lvm-volume-groups=")
	}) {
		return
	}
	if account != "volumed-node" {
		t.Errorf("DaemonSet: serviceAccountName %q, want volumed-node (the sidecars talk to the API)", account)
	}
	p, ok := byName["csi-provisioner"]
	if !ok {
		t.Fatal("DaemonSet: volumed provisions (--csi-loop-pool) but there is no csi-provisioner sidecar")
	}
	for _, a := range []string{"--node-deployment", "--enable-capacity", "--strict-topology", "--csi-address=/csi/csi.sock"} {
		if !slices.Contains(p.Args, a) {
			t.Errorf("csi-provisioner: no %s", a)
		}
	}
	env := map[string]string{}
	for _, e := range p.Env {
		if e.ValueFrom != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	for name, path := range map[string]string{"NODE_NAME": "spec.nodeName", "NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name"} {
		if env[name] != path {
			t.Errorf("csi-provisioner: env %s from %q, want %s", name, env[name], path)
		}
	}
	for _, name := range []string{"csi-resizer", "csi-snapshotter"} {
		if _, ok := byName[name]; !ok {
			t.Errorf("DaemonSet: no %s sidecar", name)
		}
	}
}
