"""`kubectl nimbix` (console script `kubectl-nimbix`): argument parsing, the reads, the output.

    kubectl nimbix status [-n NS | -A] [--remote] [-o table|json]
    kubectl nimbix budget [-o table|json]
    kubectl nimbix explain POD [-n NS] [-o table|json]

It reads only the API server (no JARVICE credentials): what the webhook and the controller wrote
on the pods, and the namespaces' budgets.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kubectl_nimbix import views

EXIT_ERROR = 1  # as kubectl exits on an error


def _connection_options(parser: argparse.ArgumentParser, *, default: str | None) -> None:
    """--kubeconfig/--context, before or after the command (kubectl passes them where they were typed):
    the command's copies default to SUPPRESS so they never hide the values given before it."""
    parser.add_argument(
        "--kubeconfig", default=default if default is not None else argparse.SUPPRESS, help="kubeconfig file"
    )
    parser.add_argument(
        "--context", default=default if default is not None else argparse.SUPPRESS, help="kubeconfig context"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl nimbix", description="Burst pods, their JARVICE jobs, budgets and decisions."
    )
    _connection_options(parser, default="")
    common = argparse.ArgumentParser(add_help=False)
    _connection_options(common, default=None)
    common.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", parents=[common], help="decided pods with their JARVICE job and cost")
    scope = status.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", default="", help="this namespace (default: the context's)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    status.add_argument("--remote", action="store_true", help="only pods decided remote")
    budget = commands.add_parser("budget", parents=[common], help="each namespace's remote GPUs against its budget")
    budget.add_argument(
        "--gpu-resources",
        default="nvidia.com/gpu,alpha.kubernetes.io/nvidia-gpu",
        help="the webhook's --gpu-resources (for pods burst before it recorded remote-gpus)",
    )
    explain = commands.add_parser("explain", parents=[common], help="why a pod was decided as it was")
    explain.add_argument("pod", help="the pod's name")
    explain.add_argument("-n", "--namespace", default="", help="its namespace (default: the context's)")
    return parser


def run(args: argparse.Namespace) -> str:
    from kubectl_nimbix import kubeapi  # noqa: PLC0415 - `--help` works without the kubernetes client

    api = kubeapi.connect(kubeconfig=args.kubeconfig, context=args.context)
    as_json = args.output == "json"
    if args.command == "status":
        namespace = ""
        if not args.all_namespaces:
            namespace = args.namespace or kubeapi.current_namespace(kubeconfig=args.kubeconfig, context=args.context)
        rows = views.build_status_rows(kubeapi.list_burst_pods(api, namespace=namespace), remote_only=args.remote)
        if as_json:
            return views.format_json(rows)
        if not rows:
            where = "any namespace" if args.all_namespaces else f"namespace {namespace}"
            return f"No decided pods found in {where}.\n"
        return views.format_status(rows, all_namespaces=args.all_namespaces)
    if args.command == "budget":
        resources = [r.strip() for r in args.gpu_resources.split(",") if r.strip()]
        budget_rows, problems = views.build_budget_rows(
            kubeapi.list_namespaces(api), kubeapi.list_burst_pods(api, namespace=""), gpu_resources=resources
        )
        for problem in problems:
            print(f"warning: {problem}", file=sys.stderr)  # noqa: T201 - the plugin's output is its interface
        if as_json:
            return views.format_json(budget_rows)
        return views.format_budget(budget_rows) if budget_rows else "No namespace has a budget or burst pods.\n"
    namespace = args.namespace or kubeapi.current_namespace(kubeconfig=args.kubeconfig, context=args.context)
    fields = views.explain_pod(kubeapi.read_pod(api, namespace=namespace, name=args.pod))
    return views.explain_json(fields) if as_json else views.format_explain(fields)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        from kubectl_nimbix import kubeapi  # noqa: PLC0415
    except ImportError as exc:
        print(f"error: {exc}; install the plugin with: pip install 'nimbix-burst[kubectl]'", file=sys.stderr)  # noqa: T201
        return EXIT_ERROR
    try:
        sys.stdout.write(run(args))
    except kubeapi.ApiError as exc:
        print(f"error: {exc}", file=sys.stderr)  # noqa: T201
        return EXIT_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
