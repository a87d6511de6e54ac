# /etc/profile.d/nimbix-burst.sh: keep the image's virtualenv first on PATH in login shells. The AppDef
# `run` command uses `bash -l`, and Debian's /etc/profile resets PATH for login shells.
case ":$PATH:" in
  *:/opt/venv/bin:*) ;;
  *) PATH="/opt/venv/bin:$PATH"; export PATH ;;
esac
