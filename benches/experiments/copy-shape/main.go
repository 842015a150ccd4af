// What each part of a cheiron copy's metadata costs the apiserver per write (BENCHMARKS.md,
// "What each part of a copy costs"). Replaces 1 000 Secrets of each of five shapes, 16 PUTs in
// flight, one shape per round, the shapes' order rotated every cycle so that drift in the
// machine's load hits each alike, and prints per shape the median time and apiserver CPU
// seconds (from /proc/APISERVER_PID/stat) of a round, and their medians pair by pair against
// the plain Secrets of the same cycle. Optionally under two metadata watches of all of them,
// as cheiron's controller and webhook keep of its copies. Run by ./run, which starts etcd and
// kube-apiserver for it. No kube-controller-manager runs: the garbage collector's share of an
// ownerReference is not in these figures.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

const namespaces = 1000
const inFlight = 16
const selector = "app.kubernetes.io/managed-by"
const selected = "copy-shape-experiment"

// A shape: which of a copy's metadata its Secrets carry. Every shape has the label the watches
// select on, as the bare client's plain Secrets of benches/cluster.rs have one label.
type shape struct {
	name       string
	labels     bool // cheiron's two manager labels besides the selected one
	annotation bool // the content-hash annotation
	owner      bool // an ownerReference to the manager
}

var shapes = []shape{
	{name: "plain"},
	{name: "+annotation", annotation: true},
	{name: "+2 labels", labels: true},
	{name: "+owner", owner: true},
	{name: "copy", labels: true, annotation: true, owner: true},
}

func config() *rest.Config {
	c := &rest.Config{
		Host:        os.Getenv("APISERVER"),
		BearerToken: os.Getenv("TOKEN"),
		QPS:         100000,
		Burst:       100000,
	}
	c.TLSClientConfig.Insecure = true
	// JSON, as kube-rs writes.
	c.ContentType = "application/json"
	return c
}

// apiserverCPU is the apiserver's user and system CPU seconds so far.
func apiserverCPU() float64 {
	b, err := os.ReadFile("/proc/" + os.Getenv("APISERVER_PID") + "/stat")
	if err != nil {
		panic(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	user, _ := strconv.ParseFloat(f[11], 64)
	system, _ := strconv.ParseFloat(f[12], 64)
	return (user + system) / 100
}

// secret is shape k's Secret in namespace i as round r writes it: the data changes every
// round, and so does the annotation (it is the hash of the data).
func secret(k, i, r int) *corev1.Secret {
	sh := shapes[k]
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("shape-%d", k),
			Namespace: fmt.Sprintf("shape-%d", i),
			Labels:    map[string]string{selector: selected},
		},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{".dockerconfigjson": []byte(fmt.Sprintf(
			`{"auths":{"registry.example.com":{"username":"bench","password":"p%08d","auth":"YmVuY2g6cA=="}}}`, r))},
	}
	if sh.labels {
		s.Labels["cheiron.anny.co/manager-kind"] = "ClusterImagePullSecretManager"
		s.Labels["cheiron.anny.co/manager-name"] = "rotation"
	}
	if sh.annotation {
		s.Annotations = map[string]string{"cheiron.anny.co/content-sha256": fmt.Sprintf("%064d", r)}
	}
	if sh.owner {
		controller := true
		s.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "cheiron.anny.co/v1alpha1",
			Kind:       "ClusterImagePullSecretManager",
			Name:       "rotation",
			UID:        "0f0f0f0f-0000-0000-0000-000000000000",
			Controller: &controller,
		}}
	}
	return s
}

// round replaces every Secret of shape k and returns how long that took.
func round(cs *kubernetes.Clientset, k, r int) time.Duration {
	ctx := context.Background()
	start := time.Now()
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < inFlight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				s := secret(k, i, r)
				if _, err := cs.CoreV1().Secrets(s.Namespace).Update(ctx, s, metav1.UpdateOptions{FieldManager: "cheiron"}); err != nil {
					panic(err)
				}
			}
		}()
	}
	for i := 0; i < namespaces; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return time.Since(start)
}

func median(a []float64) float64 {
	b := append([]float64{}, a...)
	sort.Float64s(b)
	return b[len(b)/2]
}

func main() {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(config())
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "shape-0", metav1.GetOptions{}); err != nil {
		for i := 0; i < namespaces; i++ {
			ns := fmt.Sprintf("shape-%d", i)
			if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				panic(err)
			}
			for k := range shapes {
				if _, err := cs.CoreV1().Secrets(ns).Create(ctx, secret(k, i, 0), metav1.CreateOptions{FieldManager: "cheiron"}); err != nil {
					panic(err)
				}
			}
		}
	}
	watches, err := strconv.Atoi(os.Getenv("WATCHES"))
	if err != nil {
		panic(fmt.Sprintf("WATCHES: %v", err))
	}
	for w := 0; w < watches; w++ {
		watch, err := metadata.NewForConfigOrDie(config()).
			Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).
			Namespace("").
			Watch(ctx, metav1.ListOptions{LabelSelector: selector + "=" + selected})
		if err != nil {
			panic(err)
		}
		go func() {
			for range watch.ResultChan() {
			}
		}()
	}
	time.Sleep(time.Second)
	cycles, err := strconv.Atoi(os.Getenv("CYCLES"))
	if err != nil {
		panic(fmt.Sprintf("CYCLES: %v", err))
	}
	times := make([][]float64, len(shapes))
	cpu := make([][]float64, len(shapes))
	r := 1
	for c := 0; c < cycles; c++ {
		for j := range shapes {
			k := (j + c) % len(shapes)
			before := apiserverCPU()
			took := round(cs, k, r)
			r++
			cpu[k] = append(cpu[k], apiserverCPU()-before)
			times[k] = append(times[k], float64(took.Milliseconds()))
			time.Sleep(300 * time.Millisecond)
		}
	}
	fmt.Printf("%d cycles, %d metadata watches; per shape: median time and apiserver CPU of a round of %d PUTs, and the medians of its ratios to the plain round of the same cycle\n",
		cycles, watches, namespaces)
	for k, sh := range shapes {
		var took, cost []float64
		for c := range times[k] {
			took = append(took, times[k][c]/times[0][c])
			cost = append(cost, cpu[k][c]/cpu[0][c])
		}
		fmt.Printf("%-12s time %5.0f ms (%.3f x plain)   apiserver CPU %.3f s (%.3f x plain)\n",
			sh.name, median(times[k]), median(took), median(cpu[k]), median(cost))
	}
}
