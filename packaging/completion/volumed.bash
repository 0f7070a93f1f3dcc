# bash completion for volumed; made by: volumed completion bash
_volumed() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "run status validate wait shutdown disks wipe recovery-key completion version help" -- "$cur"))
        return
    fi
    local cmd=${COMP_WORDS[1]} socket=() i
    for ((i = 2; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
        --socket | -socket) socket=(--socket "${COMP_WORDS[i + 1]}") ;;
        --socket=* | -socket=*) socket=(--socket "${COMP_WORDS[i]#*=}") ;;
        esac
    done
    local flags="" operands=""
    case $cmd in
    run)
        case $prev in
        --log-format | -log-format) COMPREPLY=($(compgen -W "text json" -- "$cur")); return ;;
        --log-level | -log-level) COMPREPLY=($(compgen -W "debug info warn error" -- "$cur")); return ;;
        --config-dir | -config-dir | --state-dir | -state-dir | --socket | -socket | --ready-dir | -ready-dir | --firmware-root | -firmware-root | --csi-loop-pool | -csi-loop-pool) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --metrics-address | -metrics-address | --resync | -resync | --parallel | -parallel | --op-timeout | -op-timeout | --csi-endpoint | -csi-endpoint | --node-id | -node-id | --csi-loop-reserve | -csi-loop-reserve | --csi-lvm-volume-groups | -csi-lvm-volume-groups) return ;;
        esac
        flags="--config-dir --state-dir --socket --ready-dir --metrics-address --resync --log-format --log-level --parallel --op-timeout --firmware-root --csi-endpoint --csi-allow-suid-dev --node-id --csi-loop-pool --csi-loop-reserve --csi-lvm-volume-groups" operands="" ;;
    status)
        case $prev in
        --o | -o) COMPREPLY=($(compgen -W "table json" -- "$cur")); return ;;
        --socket | -socket) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        esac
        flags="-o --socket" operands="volumes" ;;
    validate)
        case $prev in
        --state-dir | -state-dir) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        esac
        flags="--strict --state-dir" operands="files" ;;
    wait)
        case $prev in
        --socket | -socket) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --timeout | -timeout) return ;;
        esac
        flags="--timeout --fail-missing --socket" operands="volumes" ;;
    shutdown)
        case $prev in
        --socket | -socket) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --timeout | -timeout) return ;;
        esac
        flags="--network --undo --timeout --socket" operands="" ;;
    disks)
        case $prev in
        --o | -o) COMPREPLY=($(compgen -W "table json" -- "$cur")); return ;;
        --socket | -socket) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --match | -match) return ;;
        esac
        flags="-o --match --socket" operands="" ;;
    wipe)
        case $prev in
        --state-dir | -state-dir | --firmware-root | -firmware-root | --socket | -socket) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --volume | -volume) return ;;
        esac
        flags="--yes --volume --state-dir --firmware-root --socket" operands="" ;;
    recovery-key)
        case $prev in
        --socket | -socket) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --timeout | -timeout) return ;;
        esac
        flags="--timeout --socket" operands="volumes" ;;
    completion)
        flags="" operands="shells" ;;
    version)
        flags="" operands="" ;;
    help)
        flags="" operands="" ;;
    *) return ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
        return
    fi
    case $operands in
    volumes) COMPREPLY=($(compgen -W "$(volumed __complete-volumes "${socket[@]}" 2>/dev/null)" -- "$cur")) ;;
    files) COMPREPLY=($(compgen -f -- "$cur")) ;;
    shells) COMPREPLY=($(compgen -W "bash zsh" -- "$cur")) ;;
    esac
}
complete -F _volumed volumed
