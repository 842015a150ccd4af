// Command baseline is the typical Go pull-secret webhook that
// benches/peers measures cheiron against: written the way
// controller-runtime-based peers write one (a kubebuilder defaulting
// webhook). It decodes the typed corev1.Pod, appends the pull Secret to
// spec.imagePullSecrets unless it is there already, and diffs the original
// against the re-marshalled Pod to a JSON patch with
// admission.PatchResponseFromRaw, served by controller-runtime's webhook
// server (net/http, crypto/tls).
//
// It is a benchmark peer, not part of cheiron: see BENCHMARKS.md.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

type podMutator struct {
	decoder admission.Decoder
	secret  string
}

// Handle is the whole of the webhook's logic, as in a kubebuilder scaffold.
func (m *podMutator) Handle(_ context.Context, req admission.Request) admission.Response {
	pod := &corev1.Pod{}
	if err := m.decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == m.secret {
			return admission.Allowed("already present")
		}
	}
	pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: m.secret})
	marshaled, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, marshaled)
}

func main() {
	port := flag.Int("port", 9443, "HTTPS port")
	certDir := flag.String("cert-dir", "", "directory holding tls.crt and tls.key")
	secret := flag.String("secret", "regcred", "name of the pull Secret to add")
	path := flag.String("path", "/mutate", "URL path of the webhook")
	http2 := flag.Bool("http2", true, "offer HTTP/2 (controller-runtime's default; kubebuilder scaffolds turn it off)")
	flag.Parse()
	if *certDir == "" {
		fmt.Fprintln(os.Stderr, "baseline: --cert-dir is required")
		os.Exit(2)
	}

	opts := webhook.Options{Port: *port, CertDir: *certDir}
	if !*http2 {
		opts.TLSOpts = append(opts.TLSOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	srv := webhook.NewServer(opts)
	srv.Register(*path, &webhook.Admission{Handler: &podMutator{
		decoder: admission.NewDecoder(scheme.Scheme),
		secret:  *secret,
	}})

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "baseline:", err)
		os.Exit(1)
	}
}
