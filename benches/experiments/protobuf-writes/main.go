// Whether writing cheiron's copies in protobuf instead of JSON would make a rotation cheaper
// for the apiserver (BENCHMARKS.md, "Protobuf writes, an experiment"). Replaces 1 000 Secrets
// shaped like cheiron's copies (three labels, the content-hash annotation, an ownerReference),
// 16 PUTs in flight, in rounds that alternate JSON and protobuf (the order swapped every
// pair), optionally under two metadata watches of those Secrets, and prints the time and the
// apiserver's CPU seconds (from /proc/APISERVER_PID/stat) of each kind, and their ratio pair
// by pair. Run by ./run, which starts etcd and kube-apiserver for it.
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

const copies = 1000
const inFlight = 16

const jsonType = "application/json"
const protobufType = "application/vnd.kubernetes.protobuf"

func config(contentType string) *rest.Config {
	c := &rest.Config{
		Host:        os.Getenv("APISERVER"),
		BearerToken: os.Getenv("TOKEN"),
		QPS:         100000,
		Burst:       100000,
	}
	c.TLSClientConfig.Insecure = true
	c.ContentType = contentType
	c.AcceptContentTypes = contentType
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

// copyOf is copy i as round r writes it.
func copyOf(i, r int) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "copy",
			Namespace: fmt.Sprintf("pb-%d", i),
			Labels: map[string]string{
				"app.kubernetes.io/managed-by": "protobuf-experiment",
				"cheiron.anny.co/manager-kind": "ClusterImagePullSecretManager",
				"cheiron.anny.co/manager-name": "rotation",
			},
			Annotations: map[string]string{"cheiron.anny.co/content-hash": fmt.Sprintf("sha256:%064d", r)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "cheiron.anny.co/v1alpha1",
				Kind:       "ClusterImagePullSecretManager",
				Name:       "rotation",
				UID:        "0f0f0f0f-0000-0000-0000-000000000000",
			}},
		},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{".dockerconfigjson": []byte(fmt.Sprintf(
			`{"auths":{"registry.example.com":{"username":"bench","password":"p%08d","auth":"YmVuY2g6cA=="}}}`, r))},
	}
}

// round replaces every copy through cs and returns how long that took.
func round(cs *kubernetes.Clientset, r int) time.Duration {
	ctx := context.Background()
	start := time.Now()
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < inFlight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				s := copyOf(i, r)
				if _, err := cs.CoreV1().Secrets(s.Namespace).Update(ctx, s, metav1.UpdateOptions{FieldManager: "cheiron"}); err != nil {
					panic(err)
				}
			}
		}()
	}
	for i := 0; i < copies; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return time.Since(start)
}

func mean(a []float64) float64 {
	s := 0.0
	for _, v := range a {
		s += v
	}
	return s / float64(len(a))
}

func median(a []float64) float64 {
	b := append([]float64{}, a...)
	sort.Float64s(b)
	return b[len(b)/2]
}

func main() {
	ctx := context.Background()
	clients := map[string]*kubernetes.Clientset{
		"json":     kubernetes.NewForConfigOrDie(config(jsonType)),
		"protobuf": kubernetes.NewForConfigOrDie(config(protobufType)),
	}
	for i := 0; i < copies; i++ {
		ns := fmt.Sprintf("pb-%d", i)
		clients["json"].CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		clients["json"].CoreV1().Secrets(ns).Create(ctx, copyOf(i, 0), metav1.CreateOptions{FieldManager: "cheiron"})
	}
	// WATCHES=json|protobuf: two metadata watches of the copies, as cheiron's controller and
	// webhook keep (both JSON in cheiron, as kube-rs asks for JSON).
	if watches := os.Getenv("WATCHES"); watches != "" {
		contentType := jsonType
		if watches == "protobuf" {
			contentType = protobufType
		}
		for w := 0; w < 2; w++ {
			watch, err := metadata.NewForConfigOrDie(config(contentType)).
				Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).
				Namespace("").
				Watch(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=protobuf-experiment"})
			if err != nil {
				panic(err)
			}
			go func() {
				for range watch.ResultChan() {
				}
			}()
		}
		time.Sleep(time.Second)
	}
	pairs, err := strconv.Atoi(os.Getenv("PAIRS"))
	if err != nil {
		panic(fmt.Sprintf("PAIRS: %v", err))
	}
	times := map[string][]float64{}
	cpu := map[string][]float64{}
	r := 1
	for k := 0; k < pairs; k++ {
		order := []string{"json", "protobuf"}
		if k%2 == 1 {
			order = []string{"protobuf", "json"}
		}
		for _, kind := range order {
			before := apiserverCPU()
			took := round(clients[kind], r)
			r++
			cpu[kind] = append(cpu[kind], apiserverCPU()-before)
			times[kind] = append(times[kind], float64(took.Milliseconds()))
			time.Sleep(300 * time.Millisecond)
		}
	}
	for _, kind := range []string{"json", "protobuf"} {
		fmt.Printf("%-8s time mean %.0f median %.0f ms; apiserver CPU mean %.3f median %.3f s\n",
			kind, mean(times[kind]), median(times[kind]), mean(cpu[kind]), median(cpu[kind]))
	}
	var took, cost []float64
	for i := range times["json"] {
		took = append(took, times["protobuf"][i]/times["json"][i])
		cost = append(cost, cpu["protobuf"][i]/cpu["json"][i])
	}
	fmt.Printf("protobuf/json, pair by pair: time mean %.3f median %.3f; CPU mean %.3f median %.3f (%d pairs, watches: %q)\n",
		mean(took), median(took), mean(cost), median(cost), len(took), os.Getenv("WATCHES"))
}
