package deploy_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// ---------------------------------------------------------------------------
// Kubernetes

type k8sObject struct {
	file string
	doc  map[string]any
}

func (o k8sObject) kind() string { return str(o.doc, "kind") }
func (o k8sObject) name() string { return str(o.doc, "metadata", "name") }
func (o k8sObject) String() string {
	return fmt.Sprintf("%s: %s %s", o.file, o.kind(), o.name())
}

// k8sObjects reads every manifest kustomization.yaml lists, and checks
// that it lists every manifest in k8s/.
func k8sObjects(t *testing.T) []k8sObject {
	t.Helper()
	docs, err := yamlDocs("k8s/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kust := docs[0]
	if str(kust, "kind") != "Kustomization" || !strings.HasPrefix(str(kust, "apiVersion"), "kustomize.config.k8s.io/") {
		t.Errorf("k8s/kustomization.yaml: not a Kustomization")
	}
	resources := strs(kust, "resources")
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" && !slices.Contains(resources, base) {
			t.Errorf("k8s/kustomization.yaml does not list %s", base)
		}
	}
	var objs []k8sObject
	for _, r := range resources {
		docs, err := yamlDocs(filepath.Join("k8s", r))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			objs = append(objs, k8sObject{file: "k8s/" + r, doc: d})
		}
	}
	return objs
}

func find(objs []k8sObject, kind, name string) *k8sObject {
	for i := range objs {
		if objs[i].kind() == kind && objs[i].name() == name {
			return &objs[i]
		}
	}
	return nil
}

// matches reports whether labels carry every key of selector.
func matches(selector, labels map[string]any) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if str(labels[k]) != str(v) {
			return false
		}
	}
	return true
}

func TestK8sObjects(t *testing.T) {
	objs := k8sObjects(t)
	if len(objs) == 0 {
		t.Fatal("no Kubernetes objects")
	}
	seen := map[string]bool{}
	for _, o := range objs {
		if str(o.doc, "apiVersion") == "" || o.kind() == "" || o.name() == "" {
			t.Errorf("%s: an object without apiVersion, kind or metadata.name", o.file)
			continue
		}
		key := o.kind() + "/" + o.name()
		if seen[key] {
			t.Errorf("%s: %s twice", o.file, key)
		}
		seen[key] = true
		if o.kind() != "Namespace" && str(o.doc, "metadata", "namespace") != "toolgate" {
			t.Errorf("%s: want metadata.namespace toolgate (so that kubectl apply -f works too)", o)
		}
		// No secret is shipped: Secrets are made by the commands the README
		// gives, or by cert-manager.
		if o.kind() == "Secret" {
			t.Errorf("%s: a Secret in the manifests: create it with a documented command instead (deploy/README.md)", o)
		}
	}
	if find(objs, "Namespace", "toolgate") == nil {
		t.Error("no Namespace toolgate")
	}
}

// workload is a Deployment's or StatefulSet's pod template, checked for
// what every pod here must have.
func checkWorkload(t *testing.T, objs []k8sObject, o k8sObject) {
	t.Helper()
	tmpl := mapping(o.doc, "spec", "template")
	if !matches(mapping(o.doc, "spec", "selector", "matchLabels"), mapping(tmpl, "metadata", "labels")) {
		t.Errorf("%s: spec.selector does not select its own pods", o)
	}
	pod := mapping(tmpl, "spec")
	if get(pod, "securityContext", "runAsNonRoot") != true {
		t.Errorf("%s: want securityContext.runAsNonRoot: true", o)
	}
	if uid, _ := get(pod, "securityContext", "runAsUser").(int); uid == 0 {
		t.Errorf("%s: want a non-zero securityContext.runAsUser", o)
	}
	if get(pod, "enableServiceLinks") != false {
		t.Errorf("%s: want enableServiceLinks: false (service links put *_PORT variables in the environment)", o)
	}
	vols := map[string]any{}
	for _, v := range list(pod, "volumes") {
		vols[str(v, "name")] = v
		for _, src := range volumeSources(v) {
			if cm := str(src, "configMap", "name"); cm != "" && find(objs, "ConfigMap", cm) == nil {
				t.Errorf("%s: volume %s: no ConfigMap %s", o, str(v, "name"), cm)
			}
			if s := secretName(src); s != "" && !secretMade(objs, s) {
				t.Errorf("%s: volume %s: no Secret %s: neither a Certificate's nor one deploy/README.md's commands create", o, str(v, "name"), s)
			}
		}
	}
	for _, c := range list(o.doc, "spec", "volumeClaimTemplates") {
		vols[str(c, "metadata", "name")] = c
	}
	containers := list(pod, "containers")
	if len(containers) == 0 {
		t.Errorf("%s: no containers", o)
	}
	for _, c := range containers {
		where := fmt.Sprintf("%s container %s", o, str(c, "name"))
		if str(c, "image") == "" {
			t.Errorf("%s: no image", where)
		}
		for _, kind := range []string{"requests", "limits"} {
			for _, res := range []string{"cpu", "memory"} {
				if str(c, "resources", kind, res) == "" {
					t.Errorf("%s: no resources.%s.%s", where, kind, res)
				}
			}
		}
		if get(c, "securityContext", "readOnlyRootFilesystem") != true {
			t.Errorf("%s: want securityContext.readOnlyRootFilesystem: true", where)
		}
		if get(c, "securityContext", "allowPrivilegeEscalation") != false {
			t.Errorf("%s: want securityContext.allowPrivilegeEscalation: false", where)
		}
		if !slices.Contains(strs(c, "securityContext", "capabilities", "drop"), "ALL") {
			t.Errorf("%s: want securityContext.capabilities.drop: [ALL]", where)
		}
		for _, m := range list(c, "volumeMounts") {
			if vols[str(m, "name")] == nil {
				t.Errorf("%s: mounts volume %s, which the pod does not have", where, str(m, "name"))
			}
		}
		for _, probe := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
			if p := mapping(c, probe); p != nil && !containerHasPort(c, get(p, "httpGet", "port")) {
				t.Errorf("%s: %s asks port %v, which the container does not open", where, probe, get(p, "httpGet", "port"))
			}
		}
	}
}

func containerHasPort(c any, port any) bool {
	for _, p := range list(c, "ports") {
		if str(p, "name") == str(port) || str(p, "containerPort") == str(port) {
			return true
		}
	}
	return false
}

// portNumber resolves a probe's or Service's port (a name or a number)
// against a container's ports.
func portNumber(c any, port any) string {
	for _, p := range list(c, "ports") {
		if str(p, "name") == str(port) || str(p, "containerPort") == str(port) {
			return str(p, "containerPort")
		}
	}
	return ""
}

func TestK8sWorkloads(t *testing.T) {
	objs := k8sObjects(t)
	n := 0
	for _, o := range objs {
		if o.kind() == "Deployment" || o.kind() == "StatefulSet" {
			n++
			checkWorkload(t, objs, o)
		}
	}
	if n == 0 {
		t.Fatal("no Deployments or StatefulSets")
	}
	// Every Service selects pods that open the port it sends to.
	for _, svc := range objs {
		if svc.kind() != "Service" {
			continue
		}
		found := false
		for _, o := range objs {
			if (o.kind() != "Deployment" && o.kind() != "StatefulSet") || !matches(mapping(svc.doc, "spec", "selector"), mapping(o.doc, "spec", "template", "metadata", "labels")) {
				continue
			}
			found = true
			for _, p := range list(svc.doc, "spec", "ports") {
				target := get(p, "targetPort")
				if target == nil {
					target = get(p, "port")
				}
				if !slices.ContainsFunc(list(o.doc, "spec", "template", "spec", "containers"), func(c any) bool { return containerHasPort(c, target) }) {
					t.Errorf("%s: port %v: %s opens no such port", svc, target, o)
				}
			}
		}
		if !found {
			t.Errorf("%s selects no pods", svc)
		}
	}
}

// volumeSources are what a pod volume is made of: a projected volume's
// sources, or the volume itself.
func volumeSources(v any) []any {
	if p := mapping(v, "projected"); p != nil {
		return list(p, "sources")
	}
	return []any{v}
}

// secretName is the Secret a volume source reads, if any.
func secretName(src any) string {
	if n := str(src, "secret", "secretName"); n != "" {
		return n
	}
	return str(src, "secret", "name")
}

var createSecretRE = regexp.MustCompile(`create secret generic ([a-z0-9.-]+)`)

// secretMade reports whether a Secret is made by a cert-manager
// Certificate of the manifests or by the commands deploy/README.md gives.
func secretMade(objs []k8sObject, name string) bool {
	for _, o := range objs {
		if o.kind() == "Certificate" && str(o.doc, "spec", "secretName") == name {
			return true
		}
	}
	data, _ := os.ReadFile("README.md")
	for _, m := range createSecretRE.FindAllStringSubmatch(string(data), -1) {
		if m[1] == name {
			return true
		}
	}
	return false
}

// readmeBlocks returns the README's shell code blocks.
func readmeBlocks(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?ms)^```sh\n(.*?)^```").FindAllStringSubmatch(string(data), -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// readmeSecrets runs the README's commands that create the Kubernetes
// Secrets, with the toolgate built here and a kubectl that only records
// what it is asked, and returns each Secret's keys: the files they were
// made from.
func readmeSecrets(t *testing.T) map[string]map[string]string {
	t.Helper()
	var block string
	for _, b := range readmeBlocks(t) {
		if strings.Contains(b, "create secret generic") {
			if block != "" {
				t.Fatal("README.md: two sh blocks create Secrets: want one")
			}
			block = b
		}
	}
	if block == "" {
		t.Fatal("README.md: no sh block creates the Kubernetes Secrets (kubectl create secret generic)")
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "kubectl.log")
	fake := `kubectl() { for a in "$@"; do printf '%s\n' "$a"; done >> "$KUBECTL_LOG"; printf -- '--end--\n' >> "$KUBECTL_LOG"; }` + "\n"
	if _, err := exec.LookPath("openssl"); err != nil {
		// The README makes tokens with `openssl rand -hex N`; without
		// openssl, the same from /dev/urandom.
		fake += `openssl() { [ "$1 $2" = "rand -hex" ] || return 1; od -An -tx1 -N"$3" /dev/urandom | tr -d ' \n'; echo; }` + "\n"
	}
	cmd := exec.Command("/bin/sh", "-e", "-c", fake+block)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + filepath.Dir(toolgate(t).path) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + t.TempDir(), "KUBECTL_LOG=" + log,
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README.md: the commands that create the Secrets: %v\n%s", err, out)
	}
	calls, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("README.md: the Secrets' commands call no kubectl: %v", err)
	}
	secrets := map[string]map[string]string{}
	for _, call := range strings.Split(strings.TrimSuffix(string(calls), "--end--\n"), "--end--\n") {
		args := strings.Split(strings.TrimSuffix(call, "\n"), "\n")
		i := slices.Index(args, "generic")
		if i < 2 || args[i-2] != "create" || args[i-1] != "secret" || i+1 >= len(args) {
			continue
		}
		if ns := slices.Index(args, "-n"); ns < 0 || ns+1 >= len(args) || args[ns+1] != "toolgate" {
			t.Errorf("README.md: kubectl %s: want -n toolgate", strings.Join(args, " "))
		}
		name := args[i+1]
		keys := map[string]string{}
		for j := i + 2; j < len(args); j++ {
			from, ok := strings.CutPrefix(args[j], "--from-file=")
			if !ok {
				if args[j] == "--from-file" && j+1 < len(args) {
					j++
					from, ok = args[j], true
				}
			}
			if !ok {
				continue
			}
			key, path, named := strings.Cut(from, "=")
			if !named {
				path, key = key, filepath.Base(key)
			}
			full := filepath.Join(dir, path)
			fi, err := os.Stat(full)
			if err != nil {
				t.Errorf("README.md: secret %s: --from-file %s: %v", name, from, err)
				continue
			}
			if fi.IsDir() && !named {
				entries, _ := os.ReadDir(full)
				for _, e := range entries {
					if e.Type().IsRegular() {
						keys[e.Name()] = filepath.Join(full, e.Name())
					}
				}
				continue
			}
			keys[key] = full
		}
		secrets[name] = keys
	}
	return secrets
}

// k8sSecrets are the Secrets the pods mount, with files for each key: those
// README.md's commands make, and for each Certificate a certificate for its
// names (as cert-manager would issue it).
func k8sSecrets(t *testing.T, objs []k8sObject) map[string]map[string]string {
	t.Helper()
	secrets := readmeSecrets(t)
	for _, o := range objs {
		if o.kind() == "Certificate" {
			secrets[str(o.doc, "spec", "secretName")] = issueCert(t, strs(o.doc, "spec", "dnsNames"))
		}
	}
	return secrets
}

// issueCert makes a CA and a certificate it signs for names, for server and
// client auth, as files named as cert-manager names a Secret's keys.
func issueCert(t *testing.T, names []string) map[string]string {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "deploy test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string][]byte{
		"ca.crt":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	out := map[string]string{}
	for k, data := range files {
		out[k] = filepath.Join(dir, k)
		if err := os.WriteFile(out[k], data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// k8sPodFS lays out what a container sees through its volume mounts:
// ConfigMaps from the manifests, Secrets from secrets, empty directories
// for the rest.
func k8sPodFS(t *testing.T, objs []k8sObject, o k8sObject, c any, secrets map[string]map[string]string) containerFS {
	t.Helper()
	where := fmt.Sprintf("%s container %s", o, str(c, "name"))
	pod := mapping(o.doc, "spec", "template", "spec")
	targets := map[string]string{}
	for _, m := range list(c, "volumeMounts") {
		var vol any
		for _, v := range list(pod, "volumes") {
			if str(v, "name") == str(m, "name") {
				vol = v
			}
		}
		dir := t.TempDir()
		if vol != nil {
			for _, src := range volumeSources(vol) {
				layoutSource(t, where, objs, src, dir, secrets)
			}
		}
		host := dir
		if sub := str(m, "subPath"); sub != "" {
			host = filepath.Join(dir, sub)
		}
		targets[str(m, "mountPath")] = host
	}
	return newContainerFS(t, where, targets)
}

// layoutSource writes a ConfigMap's or Secret's keys (or the items it
// names) into dir.
func layoutSource(t *testing.T, where string, objs []k8sObject, src any, dir string, secrets map[string]map[string]string) {
	t.Helper()
	var keys map[string]func() ([]byte, error)
	var items []any
	switch {
	case mapping(src, "configMap") != nil:
		cm := find(objs, "ConfigMap", str(src, "configMap", "name"))
		if cm == nil {
			return // checkWorkload says so
		}
		keys = map[string]func() ([]byte, error){}
		for k, v := range mapping(cm.doc, "data") {
			keys[k] = func() ([]byte, error) { return []byte(str(v)), nil }
		}
		items = list(src, "configMap", "items")
	case mapping(src, "secret") != nil:
		name := secretName(src)
		files, ok := secrets[name]
		if !ok {
			t.Errorf("%s: Secret %s: neither a Certificate's nor made by deploy/README.md's commands", where, name)
			return
		}
		keys = map[string]func() ([]byte, error){}
		for k, path := range files {
			keys[k] = func() ([]byte, error) { return os.ReadFile(path) }
		}
		items = list(src, "secret", "items")
	default:
		return // emptyDir and the like: an empty directory
	}
	write := func(key, path string) {
		read, ok := keys[key]
		if !ok {
			t.Errorf("%s: key %s: the ConfigMap or Secret has no such key", where, key)
			return
		}
		data, err := read()
		if err != nil {
			t.Fatal(err)
		}
		full := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if len(items) == 0 {
		for k := range keys {
			write(k, k)
		}
		return
	}
	for _, it := range items {
		write(str(it, "key"), str(it, "path"))
	}
}

// natsStatefulSet is the NATS StatefulSet and its container.
func natsStatefulSet(t *testing.T, objs []k8sObject) (k8sObject, any) {
	t.Helper()
	for _, o := range objs {
		if o.kind() != "StatefulSet" {
			continue
		}
		for _, c := range list(o.doc, "spec", "template", "spec", "containers") {
			if strings.HasPrefix(str(c, "image"), "nats:") {
				return o, c
			}
		}
	}
	t.Fatal("no NATS StatefulSet")
	return k8sObject{}, nil
}

// natsPodConf lays out the NATS container of pod ordinal i and returns its
// configuration's path there, its absolute paths made this layout's, and
// the environment its configuration reads.
func natsPodConf(t *testing.T, objs []k8sObject, secrets map[string]map[string]string, i int) (string, containerFS, map[string]string) {
	t.Helper()
	sts, c := natsStatefulSet(t, objs)
	args := strs(c, "args")
	ci := slices.Index(args, "--config")
	if ci < 0 || ci+1 >= len(args) {
		t.Fatalf("%s: args %q give no --config", sts, args)
	}
	fs := k8sPodFS(t, objs, sts, c, secrets)
	path := fs.path(args[ci+1])
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: --config %s: %v", sts, args[ci+1], err)
	}
	// The configuration reads the pod's name from its environment.
	env := map[string]string{}
	for _, e := range list(c, "env") {
		if str(e, "valueFrom", "fieldRef", "fieldPath") == "metadata.name" {
			env[str(e, "name")] = fmt.Sprintf("%s-%d", sts.name(), i)
		}
	}
	conf := regexp.MustCompile(`(?m)(:\s*)(/[^\s"']+)`).ReplaceAllStringFunc(string(data), func(m string) string {
		sep := m[:strings.Index(m, "/")]
		return sep + fs.path(m[len(sep):])
	})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, fs, env
}

func TestK8sNATS(t *testing.T) {
	objs := k8sObjects(t)
	sts, c := natsStatefulSet(t, objs)
	replicas, _ := get(sts.doc, "spec", "replicas").(int)
	if replicas != 3 {
		t.Errorf("%s: %d replicas, want 3", sts, replicas)
	}
	svc := find(objs, "Service", str(sts.doc, "spec", "serviceName"))
	if svc == nil || str(svc.doc, "spec", "clusterIP") != "None" {
		t.Fatalf("%s: serviceName %q is not a headless Service", sts, str(sts.doc, "spec", "serviceName"))
	}
	labels := mapping(sts.doc, "spec", "template", "metadata", "labels")

	// The PodDisruptionBudget keeps a quorum.
	pdb := false
	for _, o := range objs {
		if o.kind() == "PodDisruptionBudget" && matches(mapping(o.doc, "spec", "selector", "matchLabels"), labels) {
			pdb = true
			if min, _ := get(o.doc, "spec", "minAvailable").(int); min <= replicas/2 {
				t.Errorf("%s: minAvailable %d does not keep a quorum of %d", o, min, replicas)
			}
		}
	}
	if !pdb {
		t.Errorf("no PodDisruptionBudget for %s", sts)
	}

	// The container: nats:2.12, probes on the monitoring port's /healthz.
	if img := str(c, "image"); !strings.HasPrefix(img, "nats:2.12") {
		t.Errorf("%s: image %s, want nats:2.12", sts, img)
	}
	for _, probe := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
		if p := str(c, probe, "httpGet", "path"); !strings.HasPrefix(p, "/healthz") {
			t.Errorf("%s: %s on %q, want /healthz", sts, probe, p)
		}
	}

	// The configuration as pod nats-0 sees it: the ConfigMap's nats.conf,
	// the Secret toolgate-auth's nats-auth.conf it includes, and TLS.
	path, fs, env := natsPodConf(t, objs, k8sSecrets(t, objs), 0)
	opts := natsConf(t, sts.String()+" --config", path, env, replicas)
	if want := sts.name() + "-0"; opts.ServerName != want {
		t.Errorf("%s: server_name is %q in pod %s: want the pod's name", sts, opts.ServerName, want)
	}
	for i, r := range opts.Routes {
		if want := fmt.Sprintf("%s-%d.%s", sts.name(), i, svc.name()); r.Hostname() != want {
			t.Errorf("%s: route %d to %s, want %s", sts, i, r.Host, want)
		}
	}
	if opts.TLSConfig == nil {
		t.Errorf("%s: no tls for clients", sts)
	}
	if opts.Cluster.TLSConfig == nil || opts.Cluster.TLSConfig.ClientCAs == nil {
		t.Errorf("%s: want tls with a ca_file for routes, so that peers verify each other", sts)
	}
	if !strings.HasPrefix(opts.StoreDir, fs.root) {
		t.Errorf("%s: store_dir %s is on no volume", sts, opts.StoreDir)
	}
}

// TestK8sSecrets checks that README.md's commands make every key of every
// Secret the pods mount, and who mounts what: the signing keys only where
// the intake issues credentials, the admin credential only there too.
func TestK8sSecrets(t *testing.T) {
	objs := k8sObjects(t)
	secrets := readmeSecrets(t)
	if len(secrets) == 0 {
		t.Fatal("README.md creates no Secret")
	}
	for name, keys := range secrets {
		for key, path := range keys {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if key == "tokens" {
				checkTokens(t, "README.md: secret "+name, data)
			}
		}
	}
	for _, o := range objs {
		if o.kind() != "Deployment" && o.kind() != "StatefulSet" {
			continue
		}
		for _, v := range list(o.doc, "spec", "template", "spec", "volumes") {
			for _, src := range volumeSources(v) {
				name := secretName(src)
				keys, made := secrets[name]
				if name == "" || !made {
					continue // a Certificate's, or reported by checkWorkload
				}
				items := list(src, "secret", "items")
				if len(items) == 0 {
					t.Errorf("%s: volume %s mounts all of Secret %s: name the items it needs", o, str(v, "name"), name)
				}
				for _, it := range items {
					if _, ok := keys[str(it, "key")]; !ok {
						t.Errorf("%s: volume %s: Secret %s as README.md makes it has no key %s", o, str(v, "name"), name, str(it, "key"))
					}
				}
			}
		}
	}
}

// hostCovered reports whether a certificate for names is valid for host.
func hostCovered(names []string, host string) bool {
	for _, n := range names {
		if n == host {
			return true
		}
		if suffix, ok := strings.CutPrefix(n, "*."); ok {
			if label, rest, ok := strings.Cut(host, "."); ok && label != "" && rest == suffix {
				return true
			}
		}
	}
	return false
}

// TestK8sTLS checks the NATS certificate against those who dial it: its
// names cover every server a toolgate pod and a route dials, and localhost
// (port-forward); it serves both ends of a route; toolgate's pods dial
// tls:// and trust its CA.
func TestK8sTLS(t *testing.T) {
	objs := k8sObjects(t)
	sts, _ := natsStatefulSet(t, objs)
	// The certificate whose Secret the NATS pods mount.
	var cert *k8sObject
	for _, v := range list(sts.doc, "spec", "template", "spec", "volumes") {
		for _, src := range volumeSources(v) {
			for i := range objs {
				if objs[i].kind() == "Certificate" && str(objs[i].doc, "spec", "secretName") == secretName(src) {
					cert = &objs[i]
				}
			}
		}
	}
	if cert == nil {
		t.Fatalf("%s mounts no cert-manager Certificate's Secret", sts)
	}
	names := strs(cert.doc, "spec", "dnsNames")
	usages := strs(cert.doc, "spec", "usages")
	for _, u := range []string{"server auth", "client auth"} {
		if !slices.Contains(usages, u) {
			t.Errorf("%s: usages %q lack %q (routes present the certificate both ways)", cert, usages, u)
		}
	}
	if issuer := str(cert.doc, "spec", "issuerRef", "name"); str(cert.doc, "spec", "issuerRef", "kind") != "ClusterIssuer" && find(objs, "Issuer", issuer) == nil {
		t.Errorf("%s: issuerRef %s is no Issuer of the manifests", cert, issuer)
	}
	if !hostCovered(names, "localhost") {
		t.Errorf("%s: dnsNames %q lack localhost (kubectl port-forward)", cert, names)
	}
	path, _, env := natsPodConf(t, objs, k8sSecrets(t, objs), 0)
	opts, err := processConfig(path, env)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range opts.Routes {
		if !hostCovered(names, r.Hostname()) {
			t.Errorf("%s: dnsNames %q do not cover the route to %s", cert, names, r.Hostname())
		}
	}
	secrets := readmeSecrets(t)
	secrets[str(cert.doc, "spec", "secretName")] = issueCert(t, names)
	n := 0
	for _, o := range objs {
		if o.kind() != "Deployment" {
			continue
		}
		for _, c := range list(o.doc, "spec", "template", "spec", "containers") {
			if !strings.HasPrefix(str(c, "image"), "toolgate") {
				continue
			}
			n++
			s := parseServe(t, o.String(), strs(c, "args"), nil)
			for _, u := range strings.Split(s.flags["nats"], ",") {
				pu, err := url.Parse(u)
				if err != nil || pu.Scheme != "tls" {
					t.Errorf("%s: --nats %s: want tls://", o, u)
					continue
				}
				if !hostCovered(names, pu.Hostname()) {
					t.Errorf("%s: --nats %s: %s's dnsNames do not cover %s", o, u, cert, pu.Hostname())
				}
			}
			// The CA: a directory of SSL_CERT_DIR holds the Secret's ca.crt,
			// and the system's CAs stay (executors and notifiers call out).
			var dirs []string
			for _, e := range list(c, "env") {
				if str(e, "name") == "SSL_CERT_DIR" {
					dirs = strings.Split(str(e, "value"), ":")
				}
			}
			if !slices.Contains(dirs, "/etc/ssl/certs") {
				t.Errorf("%s: SSL_CERT_DIR %q: keep /etc/ssl/certs, the system's CAs", o, dirs)
			}
			fs := k8sPodFS(t, objs, o, c, secrets)
			found := false
			for _, d := range dirs {
				if data, err := os.ReadFile(filepath.Join(fs.path(d), "ca.crt")); err == nil {
					want, _ := os.ReadFile(secrets[str(cert.doc, "spec", "secretName")]["ca.crt"])
					found = found || string(data) == string(want)
				}
			}
			if !found {
				t.Errorf("%s: no directory of SSL_CERT_DIR %q holds %s's ca.crt", o, dirs, cert)
			}
		}
	}
	if n == 0 {
		t.Fatal("no toolgate Deployments")
	}
}

func TestK8sToolgate(t *testing.T) {
	objs := k8sObjects(t)
	natsHosts := map[string]bool{}
	for _, o := range objs {
		if o.kind() == "StatefulSet" {
			n, _ := get(o.doc, "spec", "replicas").(int)
			for i := range n {
				natsHosts[fmt.Sprintf("%s-%d.%s:4222", o.name(), i, str(o.doc, "spec", "serviceName"))] = true
			}
		}
	}
	secrets := k8sSecrets(t, objs)
	creds, err := os.ReadFile(secrets["toolgate-auth"]["toolgate.creds"])
	if err != nil {
		t.Fatalf("README.md's Secret toolgate-auth: toolgate.creds: %v", err)
	}
	var cmds []serveArgs
	for _, o := range objs {
		if o.kind() != "Deployment" {
			continue
		}
		pod := mapping(o.doc, "spec", "template", "spec")
		for _, c := range list(pod, "containers") {
			if !strings.HasPrefix(str(c, "image"), "toolgate") {
				continue
			}
			where := o.String()
			env := map[string]string{}
			for _, e := range list(c, "env") {
				if strings.HasPrefix(str(e, "name"), "TOOLGATE_") {
					env[str(e, "name")] = str(e, "value")
				}
			}
			fs := k8sPodFS(t, objs, o, c, secrets)
			s := checkServe(t, where, strs(c, "args"), env, fs.path)
			cmds = append(cmds, s)
			if s.flags["replicas"] != "3" {
				t.Errorf("%s: --replicas %q, want 3", where, s.flags["replicas"])
			}
			urls := strings.Split(s.flags["nats"], ",")
			for _, u := range urls {
				pu, err := url.Parse(u)
				if err != nil || !natsHosts[pu.Host] {
					t.Errorf("%s: --nats %s is not a server of the NATS StatefulSet", where, u)
				}
			}
			if len(urls) != len(natsHosts) {
				t.Errorf("%s: --nats names %d servers, the StatefulSet has %d", where, len(urls), len(natsHosts))
			}
			// toolgate's own credential; the keys where the intake runs only.
			if got, err := os.ReadFile(fs.path(s.flags["nats-creds"])); s.flags["nats-creds"] == "" || err != nil || string(got) != string(creds) {
				t.Errorf("%s: --nats-creds %q is not toolgate-auth's toolgate.creds (%v)", where, s.flags["nats-creds"], err)
			}
			keys := seesFile(fs, secrets["toolgate-auth"]["keys.json"])
			admin := seesFile(fs, secrets["toolgate-auth"]["admin.creds"])
			switch {
			case s.runs("intake"):
				if _, err := os.Stat(fs.path(s.flags["data"] + "/auth/keys.json")); s.flags["data"] == "" || err != nil {
					t.Errorf("%s runs the intake: want --data where toolgate-auth's keys.json is mounted as auth/keys.json, so that `toolgate creds add` works (%v)", where, err)
				}
			case keys != "" || admin != "":
				t.Errorf("%s does not issue credentials but mounts the signing keys or the admin credential (%s%s)", where, keys, admin)
			}
			if s.runs("executor") && !s.runs("all") && s.flags["tools"] != "http" {
				t.Errorf("%s runs the executor role: want --tools http, got %q", where, s.flags["tools"])
			}
			if s.runs("timer") && !s.runs("all") {
				if n, _ := get(o.doc, "spec", "replicas").(int); n < 2 {
					t.Errorf("%s runs the timer: want 2 replicas or more", where)
				}
			}
			if get(pod, "securityContext", "fsGroup") == nil {
				t.Errorf("%s: want securityContext.fsGroup, so that the Secrets' files are readable by the pod's user", where)
			}
			if !s.runs("http") {
				continue
			}
			// The http role: probes on its port, tokens from the Secret.
			_, port, err := net.SplitHostPort(s.flags["http"])
			if err != nil {
				t.Errorf("%s: --http %q: %v", where, s.flags["http"], err)
			}
			for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
				if got := str(c, probe, "httpGet", "path"); got != path {
					t.Errorf("%s: %s on %q, want %s", where, probe, got, path)
				}
				if got := portNumber(c, get(c, probe, "httpGet", "port")); got != port {
					t.Errorf("%s: %s asks port %q, --http listens on %s", where, probe, got, port)
				}
			}
			data, err := os.ReadFile(fs.path(s.flags["tokens"]))
			if s.flags["tokens"] == "" || err != nil {
				t.Errorf("%s serves HTTP on %s: want --tokens naming a mounted Secret's key (%v)", where, s.flags["http"], err)
			} else {
				checkTokens(t, where+": --tokens", data)
			}
		}
	}
	if len(cmds) == 0 {
		t.Fatal("no toolgate Deployments")
	}
	checkRolesCovered(t, "k8s", cmds)

	// The Service "toolgate" reaches the http role.
	svc := find(objs, "Service", "toolgate")
	if svc == nil {
		t.Fatal("no Service toolgate")
	}
	for _, o := range objs {
		if o.kind() == "Deployment" && matches(mapping(svc.doc, "spec", "selector"), mapping(o.doc, "spec", "template", "metadata", "labels")) {
			for _, s := range cmds {
				if s.where == o.String() && !s.runs("http") {
					t.Errorf("%s selects %s, which does not run the http role", svc, o)
				}
			}
		}
	}
}

// seesFile returns the container path under which fs shows the content of
// the host file want, or "".
func seesFile(fs containerFS, want string) string {
	wantData, err := os.ReadFile(want)
	if err != nil {
		return ""
	}
	found := ""
	for target, host := range fs.targets {
		_ = filepath.WalkDir(host, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if data, err := os.ReadFile(path); err == nil && string(data) == string(wantData) {
				rel, _ := filepath.Rel(host, path)
				found = filepath.Join(target, rel)
			}
			return nil
		})
	}
	return found
}

// ---------------------------------------------------------------------------
// NetworkPolicy

// selects reports whether a label selector (matchLabels and
// matchExpressions) selects labels. An empty selector selects everything.
func selects(selector any, labels map[string]any) bool {
	for k, v := range mapping(selector, "matchLabels") {
		if l, ok := labels[k]; !ok || str(l) != str(v) {
			return false
		}
	}
	for _, e := range list(selector, "matchExpressions") {
		l, has := labels[str(e, "key")]
		in := has && slices.Contains(strs(e, "values"), str(l))
		switch str(e, "operator") {
		case "In":
			if !in {
				return false
			}
		case "NotIn":
			if in {
				return false
			}
		case "Exists":
			if !has {
				return false
			}
		case "DoesNotExist":
			if has {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// allowedPeers returns, for pods with labels and a port, every peer of
// every ingress rule of the policies that let traffic in; nil peers in the
// result stand for "from anywhere" (a rule without from).
func allowedPeers(t *testing.T, objs []k8sObject, labels map[string]any, port int) []any {
	t.Helper()
	var peers []any
	for _, o := range objs {
		if o.kind() != "NetworkPolicy" || !selects(mapping(o.doc, "spec", "podSelector"), labels) {
			continue
		}
		for _, rule := range list(o.doc, "spec", "ingress") {
			ports := list(rule, "ports")
			open := len(ports) == 0
			for _, p := range ports {
				if n, _ := get(p, "port").(int); n == port {
					open = true
				}
				if _, named := get(p, "port").(string); named {
					t.Errorf("%s: port %v: give ports by number", o, get(p, "port"))
				}
			}
			if !open {
				continue
			}
			from := list(rule, "from")
			if len(from) == 0 {
				peers = append(peers, nil)
			}
			peers = append(peers, from...)
		}
	}
	return peers
}

func TestK8sNetworkPolicy(t *testing.T) {
	objs := k8sObjects(t)
	// Ingress is denied by default to every pod of the namespace.
	deny := false
	for _, o := range objs {
		if o.kind() == "NetworkPolicy" && len(mapping(o.doc, "spec", "podSelector")) == 0 &&
			slices.Contains(strs(o.doc, "spec", "policyTypes"), "Ingress") && len(list(o.doc, "spec", "ingress")) == 0 {
			deny = true
		}
	}
	if !deny {
		t.Error("no NetworkPolicy denying ingress to every pod by default (podSelector: {}, policyTypes: [Ingress], no rules)")
	}

	type podOf struct {
		o      k8sObject
		labels map[string]any
		http   bool
	}
	var toolgatePods []podOf
	sts, _ := natsStatefulSet(t, objs)
	natsLabels := mapping(sts.doc, "spec", "template", "metadata", "labels")
	for _, o := range objs {
		if o.kind() != "Deployment" {
			continue
		}
		for _, c := range list(o.doc, "spec", "template", "spec", "containers") {
			if strings.HasPrefix(str(c, "image"), "toolgate") {
				s := parseServe(t, o.String(), strs(c, "args"), nil)
				toolgatePods = append(toolgatePods, podOf{o, mapping(o.doc, "spec", "template", "metadata", "labels"), s.runs("http")})
			}
		}
	}
	client := map[string]any{"toolgate.io/client": "true"}

	// NATS clients (4222): toolgate's pods and pods labelled as clients;
	// each peer names pods by label, so no address range nor a whole
	// namespace gets in.
	peers := allowedPeers(t, objs, natsLabels, 4222)
	for _, p := range peers {
		pods := mapping(p, "podSelector")
		switch {
		case p == nil || get(p, "ipBlock") != nil:
			t.Errorf("NATS port 4222 is open to addresses, not pods: %v", p)
		case pods == nil || len(mapping(pods, "matchLabels"))+len(list(pods, "matchExpressions")) == 0:
			t.Errorf("NATS port 4222 is open to every pod of a namespace: %v", p)
		case selects(pods, client):
		case slices.ContainsFunc(toolgatePods, func(tp podOf) bool { return selects(pods, tp.labels) }) && get(p, "namespaceSelector") == nil:
		default:
			t.Errorf("NATS port 4222 is open to pods other than toolgate's and those labelled toolgate.io/client: \"true\": %v", p)
		}
	}
	for _, tp := range toolgatePods {
		if !slices.ContainsFunc(peers, func(p any) bool {
			return p != nil && get(p, "namespaceSelector") == nil && selects(mapping(p, "podSelector"), tp.labels)
		}) {
			t.Errorf("%s: its pods may not reach NATS on 4222", tp.o)
		}
	}
	if !slices.ContainsFunc(peers, func(p any) bool {
		return p != nil && get(p, "namespaceSelector") == nil && selects(mapping(p, "podSelector"), client)
	}) {
		t.Error(`pods labelled toolgate.io/client: "true" may not reach NATS on 4222`)
	}

	// Routes (6222): the NATS pods of this namespace, only.
	peers = allowedPeers(t, objs, natsLabels, 6222)
	if len(peers) == 0 {
		t.Error("the NATS pods may not reach each other's routes on 6222")
	}
	for _, p := range peers {
		pods := mapping(p, "podSelector")
		if p == nil || get(p, "namespaceSelector") != nil || get(p, "ipBlock") != nil || len(pods) == 0 || !selects(pods, natsLabels) ||
			slices.ContainsFunc(toolgatePods, func(tp podOf) bool { return selects(pods, tp.labels) }) || selects(pods, client) {
			t.Errorf("NATS routes (6222) are open beyond the NATS pods: %v", p)
		}
	}
	// Monitoring (8222): for the kubelet's probes, which come from the node.
	if peers := allowedPeers(t, objs, natsLabels, 8222); len(peers) > 0 {
		t.Errorf("NATS monitoring (8222) is open to %v: it serves the probes only", peers)
	}

	// HTTP (8080): open within the namespace on the pods that serve it;
	// the other toolgate pods take nothing.
	for _, tp := range toolgatePods {
		peers := allowedPeers(t, objs, tp.labels, 8080)
		if !tp.http {
			if len(peers) > 0 {
				t.Errorf("%s serves no HTTP but policies let in %v", tp.o, peers)
			}
			continue
		}
		if !slices.ContainsFunc(peers, func(p any) bool {
			return p == nil || (get(p, "namespaceSelector") == nil && get(p, "ipBlock") == nil && len(mapping(p, "podSelector")) == 0 && get(p, "podSelector") != nil)
		}) {
			t.Errorf("%s serves HTTP on 8080 but the pods of its namespace may not reach it", tp.o)
		}
		if peers := allowedPeers(t, objs, tp.labels, 4222); len(peers) > 0 {
			t.Errorf("%s: policies let in %v on 4222, which it does not serve", tp.o, peers)
		}
	}
}
