// Command cert-manager-cainjector runs cert-manager's CA injector (the reconcilers of
// github.com/cert-manager/cert-manager/pkg/controller/cainjector) out of cluster, against the API
// server named by --kubeconfig or KUBECONFIG. It fills in the caBundle of webhook configurations,
// APIServices and CRDs annotated cert-manager.io/inject-ca-from (a Certificate) or
// cert-manager.io/inject-ca-from-secret (a Secret). Only the controller-runtime manager set-up is
// ours; there is no leader election: one process per cluster.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	"github.com/cert-manager/cert-manager/pkg/util"
)

var allInjectables = []string{
	cainjector.MutatingWebhookConfigurationName,
	cainjector.ValidatingWebhookConfigurationName,
	cainjector.APIServiceName,
	cainjector.CustomResourceDefinitionName,
}

func main() {
	// A FlagSet of our own: controller-runtime registers --kubeconfig on flag.CommandLine.
	flags := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	klog.InitFlags(flags)
	kubeconfig := flags.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster (default $KUBECONFIG)")
	master := flags.String("master", "", "API server URL, overriding the kubeconfig's")
	namespace := flags.String("namespace", "", "inject only from Certificates and Secrets in this namespace (default: all)")
	injectables := flags.String("injectables", strings.Join(allInjectables, ","),
		"comma-separated kinds to inject into")
	healthzAddress := flags.String("healthz-address", "0",
		"host:port serving /readyz and /healthz; \"0\" turns it off")
	_ = flags.Parse(os.Args[1:])

	logger := klog.Background().WithName("cert-manager-cainjector")
	ctrl.SetLogger(logger)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()

	if err := run(ctx, *master, *kubeconfig, *namespace, *injectables, *healthzAddress); err != nil {
		logger.Error(err, "exiting")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run(ctx context.Context, master, kubeconfig, namespace, injectables, healthzAddress string) error {
	enabled := map[string]bool{}
	for _, name := range strings.Split(injectables, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(allInjectables, name) {
			return fmt.Errorf("unknown injectable kind %q (known: %s)", name, strings.Join(allInjectables, ", "))
		}
		enabled[name] = true
	}

	restConfig, err := clientcmd.BuildConfigFromFlags(master, kubeconfig)
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	restConfig = util.RestConfigWithUserAgent(restConfig, "cainjector")

	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	utilruntime.Must(cmapi.AddToScheme(scheme))

	cacheOptions := cache.Options{ReaderFailOnMissingInformer: true}
	if namespace != "" {
		cacheOptions.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                 scheme,
		LeaderElection:         false,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: healthzAddress,
		Cache:                  cacheOptions,
		// The injectors watch Secrets as metadata only and read the few they need directly, as
		// cert-manager's own cainjector does: no cache of every Secret's data.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("informers", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return fmt.Errorf("informers not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    namespace,
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor:        enabled,
	}); err != nil {
		return fmt.Errorf("registering the injectors: %w", err)
	}
	return mgr.Start(ctx)
}
