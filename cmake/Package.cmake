# Installation layout and the Debian package (CPack's DEB generator):
#   scripts/package.sh builds it; docs/operations.md says how to use it.
include(GNUInstallDirs)

# Man pages and shell completion, made by the built binary from the same
# command definitions as --help (src/cli/app_text.cc), so they cannot drift.
set(gen_dir ${CMAKE_BINARY_DIR}/generated-docs)
add_custom_command(OUTPUT ${gen_dir}/man.stamp
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${gen_dir}/man
  COMMAND $<TARGET_FILE:tessera> gen-man ${gen_dir}/man
  COMMAND gzip -9nf ${gen_dir}/man/tessera.1 ${gen_dir}/man/mount.tessera.8
  COMMAND sh -c "gzip -9nf ${gen_dir}/man/tessera-*.1"
  COMMAND $<TARGET_FILE:tessera> completion bash > ${gen_dir}/tessera.bash
  COMMAND $<TARGET_FILE:tessera> completion zsh > ${gen_dir}/_tessera
  COMMAND ${CMAKE_COMMAND} -E touch ${gen_dir}/man.stamp
  DEPENDS tessera
  COMMENT "Generating man pages and shell completion")
add_custom_target(tessera_docs ALL DEPENDS ${gen_dir}/man.stamp)

install(TARGETS tessera RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# mount(8) and umount(8) helpers: the same program, by name.
install(CODE "
  file(MAKE_DIRECTORY \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SBINDIR}\")
  foreach(helper mount.tessera umount.tessera)
    file(CREATE_LINK ../${CMAKE_INSTALL_BINDIR}/tessera
         \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SBINDIR}/\${helper}\" SYMBOLIC)
  endforeach()")
install(DIRECTORY ${gen_dir}/man/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 FILES_MATCHING PATTERN "*.1.gz")
install(FILES ${gen_dir}/man/mount.tessera.8.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)
install(FILES ${gen_dir}/tessera.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        RENAME tessera)
install(FILES ${gen_dir}/_tessera DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/systemd/tessera@.service DESTINATION lib/systemd/system)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} FILES_MATCHING PATTERN "*.md")

set(CPACK_PACKAGE_NAME tessera)
set(CPACK_PACKAGE_VENDOR "Tessera")
set(CPACK_PACKAGE_CONTACT "Tessera developers <tessera@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed POSIX file system on object storage")
set(CPACK_PACKAGE_DESCRIPTION "Tessera mounts a volume whose file data lives as blocks in object storage (a local \
directory or any S3 server) and whose metadata lives in SQLite, Redis or PostgreSQL, through FUSE.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.invalid/tessera")
# Shared libraries from dpkg-shlibdeps (nothing hand-kept); fuse3 for
# fusermount3, which unprivileged unmounts run.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "fuse3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "redis-server, postgresql")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
include(CPack)
