# Sourced by the scripts that build pg_distlock into package directories
# and install them into private PostgreSQL trees (package.sh,
# test_real_upgrades.sh, benches/compare.sh).

# package_tree TREE DEST TARGET PG_CONFIG FEATURE: `cargo pgrx package` of
# the checkout TREE into DEST (usr/...), built in target directory TARGET
# (pgrx generates the SQL from the library it finds there, so two trees
# must never share one), plus the released install scripts of TREE, which
# cargo pgrx package leaves out.
package_tree() {
  local tree=$1 dest=$2 target=$3 pg_config=$4 feature=$5 extdir
  rm -rf "$dest"
  (cd "$tree" && CARGO_TARGET_DIR=$target cargo pgrx package --no-default-features --features "$feature" \
     --pg-config "$pg_config" --out-dir "$dest" >"$dest.log" 2>&1) || { cat "$dest.log" >&2; return 1; }
  extdir=$dest$("$pg_config" --sharedir)/extension
  if compgen -G "$tree/sql/pg_distlock--*.sql" >/dev/null; then
    install -m 644 "$tree"/sql/pg_distlock--*.sql "$extdir/"
  fi
}

# private_postgresql DIR MAJOR: a copy of /usr/{lib,share}/postgresql/MAJOR
# under DIR, without pg_distlock; its bin/ finds lib/ and share/ beside it.
private_postgresql() {
  local dir=$1 v=$2
  rm -rf "$dir"
  mkdir -p "$dir/usr/lib/postgresql" "$dir/usr/share/postgresql"
  cp -a "/usr/lib/postgresql/$v" "$dir/usr/lib/postgresql/"
  cp -a "/usr/share/postgresql/$v" "$dir/usr/share/postgresql/"
  rm -f "$dir/usr/lib/postgresql/$v/lib/pg_distlock.so" "$dir/usr/share/postgresql/$v/extension/"pg_distlock*
}

# install_package PKG DIR: the files of package directory PKG into the tree
# at DIR, each written beside its target and renamed over it: a server that
# has the old library loaded keeps it, and never sees a file rewritten.
install_package() {
  local pkg=$1 dir=$2 file
  (cd "$pkg" && find usr -type f) | while read -r file; do
    cp "$pkg/$file" "$dir/$file.new"
    mv -f "$dir/$file.new" "$dir/$file"
  done
}
