// Command cert-manager-controller runs cert-manager's own controllers (from the
// github.com/cert-manager/cert-manager module) out of cluster, against the API server named by
// --kubeconfig or KUBECONFIG. Only the glue is ours: flag parsing, the controller selection, the
// informer start and a readiness endpoint. There is no leader election: one process per cluster.
//
// The controllers register themselves with pkg/controller in their init functions; the blank
// imports below choose which ones exist in this binary (the Certificate lifecycle, the issuers,
// and the SelfSigned and CA signers). ACME, Vault, Venafi and the ingress/gateway shims are left
// out: nothing in this project uses them, and each would add watches and dependencies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// The defaults of cert-manager's own controller flags (cmd/controller in the upstream tree),
// so behaviour matches an in-cluster install.
const (
	defaultQPS            = 20
	defaultBurst          = 50
	defaultWorkers        = 5
	minimumRequestBackoff = time.Hour
	cacheSyncTimeout      = 60 * time.Second
)

var copiedAnnotationPrefixes = []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"}

func main() {
	// A FlagSet of our own: libraries in the binary may register flags (such as kubeconfig) on
	// flag.CommandLine in their init functions.
	flags := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	klog.InitFlags(flags)
	kubeconfig := flags.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster (default $KUBECONFIG)")
	master := flags.String("master", "", "API server URL, overriding the kubeconfig's")
	namespace := flags.String("namespace", "", "watch only this namespace (default: all)")
	clusterResourceNamespace := flags.String("cluster-resource-namespace", "cert-manager",
		"namespace holding the Secrets that ClusterIssuers refer to")
	controllers := flags.String("controllers", "", "comma-separated controllers to run (default: every one built in)")
	workers := flags.Int("workers", defaultWorkers, "worker goroutines per controller")
	healthzAddress := flags.String("healthz-address", "",
		"host:port serving /readyz (200 once every informer has synced) and /healthz; off when empty")
	_ = flags.Parse(os.Args[1:])

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	logger := klog.Background().WithName("cert-manager-controller")
	ctx = logf.NewContext(ctx, logger)

	names, err := selectControllers(*controllers)
	if err == nil {
		err = run(ctx, controllerpkg.ContextOptions{
			APIServerHost:      *master,
			Kubeconfig:         *kubeconfig,
			KubernetesAPIQPS:   defaultQPS,
			KubernetesAPIBurst: defaultBurst,
			Namespace:          *namespace,
			IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: *clusterResourceNamespace},
			CertificateOptions: controllerpkg.CertificateOptions{
				CopiedAnnotationPrefixes:                 copiedAnnotationPrefixes,
				CertificateRequestMinimumBackoffDuration: minimumRequestBackoff,
			},
		}, names, *workers, *healthzAddress)
	}
	if err != nil {
		logger.Error(err, "exiting")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// selectControllers returns the requested controllers, or every registered one when none is named.
func selectControllers(requested string) ([]string, error) {
	known := controllerpkg.Known()
	if strings.TrimSpace(requested) == "" {
		names := make([]string, 0, len(known))
		for name := range known {
			names = append(names, name)
		}
		slices.Sort(names)
		return names, nil
	}
	var names []string
	for _, name := range strings.Split(requested, ",") {
		name = strings.TrimSpace(name)
		if _, ok := known[name]; !ok {
			return nil, fmt.Errorf("unknown controller %q", name)
		}
		names = append(names, name)
	}
	return names, nil
}

func run(ctx context.Context, opts controllerpkg.ContextOptions, names []string, workers int, healthzAddress string) error {
	log := logf.FromContext(ctx)
	factory, err := controllerpkg.NewContextFactory(ctx, opts)
	if err != nil {
		return fmt.Errorf("building the controller context: %w", err)
	}
	// Every Context the factory builds shares these informer factories; this one is only for
	// starting them once every controller has registered the informers it needs.
	shared, err := factory.Build("cert-manager-controller")
	if err != nil {
		return fmt.Errorf("building the shared context: %w", err)
	}

	group, ctx := errgroup.WithContext(ctx)
	for _, name := range names {
		controller, err := controllerpkg.Known()[name](factory)
		if err != nil {
			return fmt.Errorf("constructing controller %s: %w", name, err)
		}
		log.Info("starting controller", "controller", name)
		group.Go(func() error {
			if err := controller.Run(workers, ctx); err != nil {
				return fmt.Errorf("controller %s: %w", name, err)
			}
			return nil
		})
	}

	stop := ctx.Done()
	shared.KubeSharedInformerFactory.Start(stop)
	shared.SharedInformerFactory.Start(stop)
	shared.HTTP01ResourceMetadataInformersFactory.Start(stop)
	if shared.GatewaySolverEnabled {
		shared.GWShared.Start(stop)
	}

	var ready atomic.Bool
	if healthzAddress != "" {
		if err := serveHealth(ctx, group, healthzAddress, &ready); err != nil {
			return err
		}
	}
	group.Go(func() error {
		syncCtx, cancelSync := context.WithTimeout(ctx, cacheSyncTimeout)
		defer cancelSync()
		for kind, ok := range shared.KubeSharedInformerFactory.WaitForCacheSync(syncCtx.Done()) {
			if !ok {
				return syncFailure(ctx, kind)
			}
		}
		for kind, ok := range shared.SharedInformerFactory.WaitForCacheSync(syncCtx.Done()) {
			if !ok {
				return syncFailure(ctx, kind)
			}
		}
		ready.Store(true)
		log.Info("informers synced; ready", "controllers", len(names))
		return nil
	})
	if err := group.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// syncFailure is an error unless the process is already shutting down.
func syncFailure(ctx context.Context, kind any) error {
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("informer for %v never synced within %s", kind, cacheSyncTimeout)
}

// serveHealth answers /healthz (alive) and /readyz (informers synced) until ctx ends.
func serveHealth(ctx context.Context, group *errgroup.Group, address string, ready *atomic.Bool) error {
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", address, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "informers not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	group.Go(func() error {
		if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	group.Go(func() error {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return server.Shutdown(shutdownCtx)
	})
	return nil
}
