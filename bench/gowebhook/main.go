// The minimal Go mutating webhook for `make bench` (issue 15): standard library only. It decodes
// each AdmissionReview (only request.uid is kept), answers allowed with one fixed JSONPatch op (a
// label, so it is valid on any pod the benchmark creates) and does nothing else: no cache, no
// logging, no metrics. What nimbix-burst adds over it is the price of Python and of our work.
package main

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
)

// maxBody matches the Python webhook's default body limit.
const maxBody = 8 << 20

type review struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Request    *reviewRequest  `json:"request,omitempty"`
	Response   *reviewResponse `json:"response,omitempty"`
}

type reviewRequest struct {
	UID string `json:"uid"`
}

type reviewResponse struct {
	UID       string `json:"uid"`
	Allowed   bool   `json:"allowed"`
	PatchType string `json:"patchType,omitempty"`
	Patch     []byte `json:"patch,omitempty"` // encoding/json writes []byte as base64, as the API wants
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8443", "listen address")
	cert := flag.String("cert", "", "serving certificate (PEM)")
	key := flag.String("key", "", "serving key (PEM)")
	marker := flag.String("marker", "go", "value of the label the patch adds")
	flag.Parse()
	patch, err := json.Marshal([]map[string]string{
		{"op": "add", "path": "/metadata/labels/bench.nimbix-burst.io~1minimal", "value": *marker},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/mutate", func(w http.ResponseWriter, r *http.Request) {
		var in review
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&in); err != nil || in.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		out := review{
			APIVersion: "admission.k8s.io/v1",
			Kind:       "AdmissionReview",
			Response:   &reviewResponse{UID: in.Request.UID, Allowed: true, PatchType: "JSONPatch", Patch: patch},
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&out)
	})
	log.Printf("listening on %s", *addr)
	log.Fatal(http.ListenAndServeTLS(*addr, *cert, *key, mux))
}
