#!/usr/bin/env bash
# Full-size keras.applications against kiln (issue 36), with the Keras oracle (../../../../../shared/tools/
# keras-oracle, set up as its README says). Not part of the tests: the models are hundreds of MB. For each
# family: Keras 3.16 builds it (weights=None, classifier_activation=None, a fixed seed), predicts two random
# images and saves .keras (make_app.py); `kiln predict` runs the file, `kiln convert` writes it back as .keras,
# and Keras predicts on kiln's file (keras_reads_kiln.py); compare.py prints kiln's largest difference from
# Keras's outputs, relative to the largest output.
#   data/keras/oracle/full_apps/check.sh [BUILD_DIR] [WORK_DIR]      (defaults: build, a new temporary folder)
#   APPS="ResNet50 VGG16" ...                                          (only these families)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kiln=$(cd "${1:-build}" && pwd)/cli/kiln
work=${2:-$(mktemp -d)}
kpython=${KPYTHON:-$here/../../../../../shared/tools/keras-oracle/kpython}
cd "$work"
apps=${APPS:-"ResNet50 ResNet50V2 VGG16 InceptionV3 Xception InceptionResNetV2 ConvNeXtTiny MobileNetV2 MobileNetV3Small
      MobileNetV3Large EfficientNetB0 EfficientNetV2B0 DenseNet121 NASNetMobile"}
for n in $apps; do
  "$kpython" "$here/make_app.py" "$n" 2>/dev/null | tail -n 1
  /usr/bin/time -f "$n kiln predict: %e s, %M KB max RSS" "$kiln" predict "$n.keras" "$n.in.csv" >"$n.kiln.csv"
  "$kiln" convert "$n.keras" "$n.kiln.keras" >/dev/null
  "$kpython" "$here/keras_reads_kiln.py" "$n" 2>/dev/null | tail -n 1
  rm -f "$n.keras" "$n.kiln.keras"
done
"$kpython" "$here/compare.py" 2>/dev/null
